#include "day0/report/json_schema.h"

#include "day0/report/report.h"

namespace day0::report {

namespace {

bool has_type(const nlohmann::json& value, const std::string& type) {
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  return false;
}

void validate(const nlohmann::json& value, const nlohmann::json& schema, const std::string& path,
              std::vector<std::string>& errors) {
  const std::string where = path.empty() ? "/" : path;
  if (schema.contains("type")) {
    const auto& t = schema["type"];
    bool ok = false;
    if (t.is_string()) {
      ok = has_type(value, t.get<std::string>());
    } else {
      for (const auto& alt : t) ok = ok || has_type(value, alt.get<std::string>());
    }
    if (!ok) {
      errors.push_back(where + ": expected type " + t.dump() + ", found " + value.type_name());
      return;
    }
  }
  if (schema.contains("const") && value != schema["const"]) {
    errors.push_back(where + ": expected " + schema["const"].dump() + ", found " + value.dump());
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& e : schema["enum"]) found = found || (e == value);
    if (!found)
      errors.push_back(where + ": expected one of " + schema["enum"].dump() + ", found " + value.dump());
  }
  if (value.is_number()) {
    if (schema.contains("minimum") && value.get<double>() < schema["minimum"].get<double>()) {
      errors.push_back(where + ": below minimum " + schema["minimum"].dump());
    }
    if (schema.contains("maximum") && value.get<double>() > schema["maximum"].get<double>()) {
      errors.push_back(where + ": above maximum " + schema["maximum"].dump());
    }
  }
  if (value.is_object()) {
    if (schema.contains("required")) {
      for (const auto& key : schema["required"]) {
        if (!value.contains(key.get<std::string>())) {
          errors.push_back(where + ": missing required key \"" + key.get<std::string>() + "\"");
        }
      }
    }
    const nlohmann::json* props = schema.contains("properties") ? &schema["properties"] : nullptr;
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string child = path + "/" + it.key();
      if (props != nullptr && props->contains(it.key())) {
        validate(it.value(), (*props)[it.key()], child, errors);
      } else if (schema.contains("additionalProperties")) {
        const auto& extra = schema["additionalProperties"];
        if (extra.is_boolean() && !extra.get<bool>()) {
          errors.push_back(child + ": unexpected key");
        } else if (extra.is_object()) {
          validate(it.value(), extra, child, errors);
        }
      }
    }
  }
  if (value.is_array()) {
    if (schema.contains("minItems") && value.size() < schema["minItems"].get<size_t>()) {
      errors.push_back(where + ": expected at least " + schema["minItems"].dump() + " items");
    }
    if (schema.contains("items")) {
      for (size_t i = 0; i < value.size(); ++i) {
        validate(value[i], schema["items"], path + "/" + std::to_string(i), errors);
      }
    }
  }
}

}  // namespace

std::vector<std::string> validate_json(const nlohmann::json& doc, const nlohmann::json& schema) {
  std::vector<std::string> errors;
  validate(doc, schema, "", errors);
  return errors;
}

const nlohmann::json& report_json_schema() {
  static const nlohmann::json schema = nlohmann::json::parse(R"JSON({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "day0 adapt report",
  "type": "object",
  "required": ["schema", "model", "family", "day0_version", "created_at", "backend", "machine", "verdict",
               "stages", "regressions"],
  "additionalProperties": false,
  "properties": {
    "schema": {"const": "day0-adapt-report/1"},
    "model": {"type": "string"},
    "family": {"type": "string"},
    "day0_version": {"type": "string"},
    "created_at": {"type": "string"},
    "backend": {"type": "string"},
    "machine": {"type": "object"},
    "verdict": {"enum": ["pass", "fail"]},
    "skipped_required": {
      "type": "array",
      "items": {"enum": ["structure", "coverage", "weights", "miniature", "alignment", "generation", "plan",
                         "distributed", "performance", "stability", "target-tokens", "target-logprobs",
                         "target-generation", "target-tools", "target-limits", "target-speed"]}
    },
    "require_all": {"type": "boolean"},
    "strict": {"type": "boolean"},
    "warnings": {"type": "integer", "minimum": 0},
    "stages": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "required": ["id", "title", "verdict", "required", "summary", "reason", "seconds", "evidence"],
        "additionalProperties": false,
        "properties": {
          "id": {"enum": ["structure", "coverage", "weights", "miniature", "alignment", "generation", "plan",
                          "distributed", "performance", "stability", "target-tokens", "target-logprobs",
                         "target-generation", "target-tools", "target-limits", "target-speed"]},
          "title": {"type": "string"},
          "verdict": {"enum": ["pass", "fail", "skipped"]},
          "required": {"type": "boolean"},
          "summary": {"type": "string"},
          "reason": {"type": "string"},
          "seconds": {"type": "number", "minimum": 0},
          "evidence": {"type": "object"},
          "warnings": {
            "type": "array",
            "items": {
              "type": "object",
              "required": ["id", "message"],
              "additionalProperties": false,
              "properties": {"id": {"type": "string"}, "message": {"type": "string"}}
            }
          }
        }
      }
    },
    "regressions": {
      "type": "array",
      "items": {
        "type": "object",
        "required": ["stage", "metric", "old", "new", "why"],
        "additionalProperties": false,
        "properties": {
          "stage": {"type": "string"}, "metric": {"type": "string"}, "old": {"type": "string"},
          "new": {"type": "string"}, "why": {"type": "string"}
        }
      }
    }
  }
})JSON");
  return schema;
}

}  // namespace day0::report
