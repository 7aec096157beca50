#include "day0/model/config_reader.h"

#include <fmt/format.h>
#include <cmath>

#include "day0/core/json_reader.h"

namespace day0 {

std::string describe_json(const nlohmann::json& value) {
  const std::string text = json_excerpt(value, 60);
  const char* kind = "";
  switch (value.type()) {
    case nlohmann::json::value_t::string:
      kind = "string ";
      break;
    case nlohmann::json::value_t::array:
      kind = "array ";
      break;
    case nlohmann::json::value_t::object:
      kind = "object ";
      break;
    case nlohmann::json::value_t::boolean:
      kind = "boolean ";
      break;
    default:
      break;
  }
  return kind + text;
}

ConfigReader::ConfigReader(const nlohmann::json& object, std::string source, std::string path)
    : object_(&object), source_(std::move(source)), path_(std::move(path)) {}

std::string ConfigReader::key_path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

ConfigReader ConfigReader::derived(const nlohmann::json& object, std::string path) const {
  ConfigReader out(object, source_, std::move(path));
  out.used_ = used_;
  return out;
}

void ConfigReader::mark_used(std::string_view key) const {
  used_->insert(key_path(key));
}

const nlohmann::json* ConfigReader::find(std::string_view key) const {
  mark_used(key);
  if (!object_->is_object()) return nullptr;
  auto it = object_->find(std::string(key));
  if (it == object_->end()) return nullptr;
  return &*it;
}

bool ConfigReader::contains(std::string_view key) const {
  return find(key) != nullptr;
}

bool ConfigReader::present(std::string_view key) const {
  const auto* value = find(key);
  return value != nullptr && !value->is_null();
}

Status ConfigReader::mismatch(std::string_view key, std::string_view expected) const {
  const auto* value = find(key);
  const std::string found = value == nullptr ? "nothing (the key is missing)" : describe_json(*value);
  return invalid_argument(
      fmt::format("{}: {}: expected {}, found {}", source_, key_path(key), expected, found));
}

Status ConfigReader::invalid(std::string_view key, std::string_view message) const {
  return invalid_argument(fmt::format("{}: {}: {}", source_, key_path(key), message));
}

Result<int64_t> ConfigReader::to_int(std::string_view key, const nlohmann::json& value, int64_t min,
                                     int64_t max) const {
  const std::string expected = max == kMaxSize ? fmt::format("an integer >= {}", min)
                                               : fmt::format("an integer in [{}, {}]", min, max);
  int64_t out = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return mismatch(key, expected);
    out = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    out = value.get<int64_t>();
  } else if (value.is_number_float()) {
    // Some exporters write 4096.0; accept integral values that a double holds exactly.
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9007199254740992.0) {
      return mismatch(key, expected);
    }
    out = static_cast<int64_t>(d);
  } else {
    return mismatch(key, expected);
  }
  if (out < min || out > max) return mismatch(key, expected);
  return out;
}

Result<int64_t> ConfigReader::required_int(std::string_view key, int64_t min, int64_t max) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    return mismatch(key, max == kMaxSize ? fmt::format("an integer >= {}", min)
                                         : fmt::format("an integer in [{}, {}]", min, max));
  }
  return to_int(key, *value, min, max);
}

Result<int64_t> ConfigReader::optional_int(std::string_view key, int64_t fallback, int64_t min,
                                           int64_t max) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return fallback;
  return to_int(key, *value, min, max);
}

Result<double> ConfigReader::required_double(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || !value->is_number()) return mismatch(key, "a number");
  const double d = value->get<double>();
  if (!std::isfinite(d)) return mismatch(key, "a finite number");
  return d;
}

Result<double> ConfigReader::optional_double(std::string_view key, double fallback) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return fallback;
  return required_double(key);
}

Result<bool> ConfigReader::optional_bool(std::string_view key, bool fallback) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_boolean()) return mismatch(key, "true or false");
  return value->get<bool>();
}

Result<std::string> ConfigReader::required_string(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || !value->is_string()) return mismatch(key, "a string");
  return value->get<std::string>();
}

Result<std::string> ConfigReader::optional_string(std::string_view key, std::string fallback) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return fallback;
  return required_string(key);
}

Result<std::vector<int64_t>> ConfigReader::optional_int_list(std::string_view key, int64_t min,
                                                             int64_t max) const {
  const auto* value = find(key);
  std::vector<int64_t> out;
  if (value == nullptr || value->is_null()) return out;
  if (!value->is_array()) return mismatch(key, "a list of integers");
  for (size_t i = 0; i < value->size(); ++i) {
    auto item = to_int(fmt::format("{}[{}]", key, i), (*value)[i], min, max);
    if (!item.is_ok()) return mismatch(key, fmt::format("a list of integers in [{}, {}]", min, max));
    out.push_back(*item);
  }
  return out;
}

Result<std::vector<std::string>> ConfigReader::optional_string_list(std::string_view key) const {
  const auto* value = find(key);
  std::vector<std::string> out;
  if (value == nullptr || value->is_null()) return out;
  if (!value->is_array()) return mismatch(key, "a list of strings");
  for (const auto& item : *value) {
    if (!item.is_string()) return mismatch(key, "a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

Result<std::optional<ConfigReader>> ConfigReader::optional_object(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return std::optional<ConfigReader>();
  if (!value->is_object()) return mismatch(key, "an object");
  ConfigReader nested(*value, source_, key_path(key));
  nested.used_ = used_;
  return std::optional<ConfigReader>(std::move(nested));
}

}  // namespace day0
