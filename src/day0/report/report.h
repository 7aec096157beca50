#pragma once
// The adapt report: the Day-0 checklist with one verdict, its evidence and its time per stage.
// Serialised as report.json (schema "day0-adapt-report/1", documented in docs/report-schema.md),
// rendered as report.md and a self-contained report.html.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "day0/core/status.h"

namespace day0::report {

inline constexpr const char* kReportSchema = "day0-adapt-report/1";

enum class Verdict { kPass, kFail, kSkipped };
const char* verdict_name(Verdict verdict);  // "pass" | "fail" | "skipped"
Result<Verdict> parse_verdict(const std::string& name);

struct StageResult {
  std::string id;     // stable key: structure, coverage, weights, miniature, alignment, plan, ...
  std::string title;  // human title
  Verdict verdict = Verdict::kSkipped;
  bool required = true;  // a failing required stage fails the run
  std::string summary;   // one line a person reads first
  std::string reason;    // why it failed or was skipped (empty when it passed)
  double seconds = 0.0;
  nlohmann::json evidence = nlohmann::json::object();  // stage-specific figures
};

// A figure that got worse against --compare's old report.
struct Regression {
  std::string stage;
  std::string metric;
  std::string old_value;
  std::string new_value;
  std::string why;
};

struct Report {
  std::string schema = kReportSchema;
  std::string model;  // what the user passed (catalog name, folder, config)
  std::string family;
  std::string day0_version;
  std::string created_at;  // ISO-8601 UTC
  std::string backend;
  nlohmann::json machine = nlohmann::json::object();
  std::vector<StageResult> stages;
  std::vector<Regression> regressions;
  Verdict verdict = Verdict::kSkipped;

  const StageResult* find_stage(const std::string& id) const;
};

// Overall verdict: fail if a required stage failed or a regression was found, else pass.
Verdict overall_verdict(const std::vector<StageResult>& stages, const std::vector<Regression>& regressions);

nlohmann::json to_json(const Report& report);
Result<Report> report_from_json(const nlohmann::json& doc);

}  // namespace day0::report
