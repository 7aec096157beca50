#include "day0/report/report.h"

#include <fmt/format.h>

#include <cctype>

namespace day0::report {

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "skipped";
}

Result<Verdict> parse_verdict(const std::string& name) {
  for (Verdict v : {Verdict::kPass, Verdict::kFail, Verdict::kSkipped}) {
    if (name == verdict_name(v)) return v;
  }
  return invalid_argument("verdict: expected pass, fail or skipped, found \"" + name + "\"");
}

const StageResult* Report::find_stage(const std::string& id) const {
  for (const auto& stage : stages) {
    if (stage.id == id) return &stage;
  }
  return nullptr;
}

size_t Report::warning_count() const {
  size_t n = 0;
  for (const auto& stage : stages) n += stage.warnings.size();
  return n;
}

void apply_strict(std::vector<StageResult>& stages) {
  for (auto& stage : stages) {
    if (stage.verdict != Verdict::kPass || stage.warnings.empty()) continue;
    std::vector<std::string> named;
    for (const auto& w : stage.warnings) named.push_back(w.id + ": " + w.message);
    stage.verdict = Verdict::kFail;
    stage.reason = fmt::format("--strict: {} warning{} fail the stage: {}", stage.warnings.size(),
                               stage.warnings.size() == 1 ? "" : "s", fmt::join(named, "; "));
  }
}

std::vector<std::string> skipped_required_stages(const std::vector<StageResult>& stages) {
  std::vector<std::string> ids;
  for (const auto& stage : stages) {
    if (stage.required && stage.verdict == Verdict::kSkipped) ids.push_back(stage.id);
  }
  return ids;
}

Verdict overall_verdict(const std::vector<StageResult>& stages, const std::vector<Regression>& regressions,
                        bool require_all) {
  if (!regressions.empty()) return Verdict::kFail;
  for (const auto& stage : stages) {
    if (stage.required && stage.verdict == Verdict::kFail) return Verdict::kFail;
  }
  if (require_all && !skipped_required_stages(stages).empty()) return Verdict::kFail;
  return Verdict::kPass;
}

std::string verdict_text(const Report& report, bool upper) {
  std::string word = verdict_name(report.verdict);
  if (upper) {
    for (char& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  auto count = [](size_t n, const char* what) {
    return fmt::format("{} required stage{} {}", n, n == 1 ? "" : "s", what);
  };
  const std::string skipped = report.skipped_required.empty()
                                  ? std::string()
                                  : fmt::format("{}: {}", count(report.skipped_required.size(), "skipped"),
                                                fmt::join(report.skipped_required, ", "));
  if (report.verdict != Verdict::kFail) {
    std::vector<std::string> with;
    if (!skipped.empty()) with.push_back(skipped);
    if (const size_t n = report.warning_count(); n > 0) {
      std::vector<std::string> named;
      for (const auto& stage : report.stages)
        for (const auto& w : stage.warnings) named.push_back(stage.id + " " + w.id);
      with.push_back(fmt::format("{} warning{}: {}", n, n == 1 ? "" : "s", fmt::join(named, ", ")));
    }
    return with.empty() ? word : fmt::format("{} with {}", word, fmt::join(with, "; "));
  }
  std::vector<std::string> why;
  std::vector<std::string> failed;
  for (const auto& stage : report.stages) {
    if (stage.required && stage.verdict == Verdict::kFail) failed.push_back(stage.id);
  }
  if (!failed.empty())
    why.push_back(fmt::format("{}: {}", count(failed.size(), "failed"), fmt::join(failed, ", ")));
  if (!report.regressions.empty()) {
    why.push_back(fmt::format("{} regression{} against the previous report", report.regressions.size(),
                              report.regressions.size() == 1 ? "" : "s"));
  }
  if (!skipped.empty()) why.push_back(report.require_all ? skipped + " (--require-all)" : skipped);
  return why.empty() ? word : fmt::format("{}: {}", word, fmt::join(why, "; "));
}

nlohmann::json to_json(const Report& report) {
  nlohmann::json doc;
  doc["schema"] = report.schema;
  doc["model"] = report.model;
  doc["family"] = report.family;
  doc["day0_version"] = report.day0_version;
  doc["created_at"] = report.created_at;
  doc["backend"] = report.backend;
  doc["machine"] = report.machine;
  doc["verdict"] = verdict_name(report.verdict);
  doc["skipped_required"] = report.skipped_required;
  doc["require_all"] = report.require_all;
  doc["strict"] = report.strict;
  doc["warnings"] = report.warning_count();
  doc["stages"] = nlohmann::json::array();
  for (const auto& s : report.stages) {
    nlohmann::json warnings = nlohmann::json::array();
    for (const auto& w : s.warnings) warnings.push_back({{"id", w.id}, {"message", w.message}});
    doc["stages"].push_back({{"id", s.id},
                             {"title", s.title},
                             {"verdict", verdict_name(s.verdict)},
                             {"required", s.required},
                             {"summary", s.summary},
                             {"reason", s.reason},
                             {"seconds", s.seconds},
                             {"evidence", s.evidence.is_null() ? nlohmann::json::object() : s.evidence},
                             {"warnings", warnings}});
  }
  doc["regressions"] = nlohmann::json::array();
  for (const auto& r : report.regressions) {
    doc["regressions"].push_back({{"stage", r.stage},
                                  {"metric", r.metric},
                                  {"old", r.old_value},
                                  {"new", r.new_value},
                                  {"why", r.why}});
  }
  return doc;
}

namespace {
Status require_string(const nlohmann::json& obj, const char* key, std::string& out,
                      const std::string& where) {
  if (!obj.contains(key) || !obj[key].is_string()) {
    return invalid_argument(where + "." + key + ": expected a string");
  }
  out = obj[key].get<std::string>();
  return Status::ok();
}
}  // namespace

Result<Report> report_from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) return invalid_argument("report: expected a JSON object");
  Report report;
  D0_RETURN_IF_ERROR(require_string(doc, "schema", report.schema, "report"));
  if (report.schema != kReportSchema) {
    return invalid_argument("report.schema: expected \"" + std::string(kReportSchema) + "\", found \"" +
                            report.schema + "\"");
  }
  D0_RETURN_IF_ERROR(require_string(doc, "model", report.model, "report"));
  (void)require_string(doc, "family", report.family, "report");
  (void)require_string(doc, "day0_version", report.day0_version, "report");
  (void)require_string(doc, "created_at", report.created_at, "report");
  (void)require_string(doc, "backend", report.backend, "report");
  if (doc.contains("machine")) report.machine = doc["machine"];
  std::string verdict;
  D0_RETURN_IF_ERROR(require_string(doc, "verdict", verdict, "report"));
  D0_ASSIGN_OR_RETURN(report.verdict, parse_verdict(verdict));
  if (!doc.contains("stages") || !doc["stages"].is_array()) {
    return invalid_argument("report.stages: expected an array");
  }
  for (size_t i = 0; i < doc["stages"].size(); ++i) {
    const auto& s = doc["stages"][i];
    const std::string where = "report.stages[" + std::to_string(i) + "]";
    if (!s.is_object()) return invalid_argument(where + ": expected an object");
    StageResult stage;
    D0_RETURN_IF_ERROR(require_string(s, "id", stage.id, where));
    (void)require_string(s, "title", stage.title, where);
    std::string v;
    D0_RETURN_IF_ERROR(require_string(s, "verdict", v, where));
    D0_ASSIGN_OR_RETURN(stage.verdict, parse_verdict(v));
    stage.required = s.value("required", true);
    (void)require_string(s, "summary", stage.summary, where);
    (void)require_string(s, "reason", stage.reason, where);
    stage.seconds = s.value("seconds", 0.0);
    if (s.contains("evidence")) stage.evidence = s["evidence"];
    if (s.contains("warnings") && s["warnings"].is_array()) {
      for (const auto& w : s["warnings"]) {
        if (!w.is_object()) return invalid_argument(where + ".warnings: expected objects {id, message}");
        stage.warnings.push_back({w.value("id", ""), w.value("message", "")});
      }
    }
    report.stages.push_back(std::move(stage));
  }
  if (doc.contains("regressions") && doc["regressions"].is_array()) {
    for (const auto& r : doc["regressions"]) {
      report.regressions.push_back({r.value("stage", ""), r.value("metric", ""), r.value("old", ""),
                                    r.value("new", ""), r.value("why", "")});
    }
  }
  // Reports written before these keys existed: the skipped required stages are in the stages.
  report.skipped_required = skipped_required_stages(report.stages);
  if (doc.contains("skipped_required") && doc["skipped_required"].is_array()) {
    report.skipped_required.clear();
    for (const auto& id : doc["skipped_required"]) {
      if (!id.is_string()) return invalid_argument("report.skipped_required: expected stage ids (strings)");
      report.skipped_required.push_back(id.get<std::string>());
    }
  }
  report.require_all =
      doc.contains("require_all") && doc["require_all"].is_boolean() && doc["require_all"].get<bool>();
  report.strict = doc.contains("strict") && doc["strict"].is_boolean() && doc["strict"].get<bool>();
  return report;
}

}  // namespace day0::report
