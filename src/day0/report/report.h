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

// Something a stage found wrong that is not a wrong answer (an HTTP status of the wrong class for a
// request the target did refuse): named, counted and shown, it fails the stage only under --strict.
struct StageWarning {
  std::string id;       // stable key: "bad_request_5xx"
  std::string message;  // what was seen, for a person
};

struct StageResult {
  std::string id;     // stable key: structure, coverage, weights, miniature, alignment, plan, ...
  std::string title;  // human title
  Verdict verdict = Verdict::kSkipped;
  bool required = true;  // a failing required stage fails the run
  std::string summary;   // one line a person reads first
  std::string reason;    // why it failed or was skipped (empty when it passed)
  double seconds = 0.0;
  nlohmann::json evidence = nlohmann::json::object();  // stage-specific figures
  std::vector<StageWarning> warnings;                  // a passing stage may carry some
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
  // Ids of the required stages that were skipped, in run order: a pass names them (it checked less
  // than the checklist asks), and under --require-all (require_all) they fail the run.
  std::vector<std::string> skipped_required;
  bool require_all = false;
  // --strict: warnings failed their stages (apply_strict) before the verdict was taken.
  bool strict = false;

  const StageResult* find_stage(const std::string& id) const;
  size_t warning_count() const;  // over every stage
};

// --strict: each passing stage with warnings fails, its reason naming them.
void apply_strict(std::vector<StageResult>& stages);

// Ids of the required stages that were skipped, in run order.
std::vector<std::string> skipped_required_stages(const std::vector<StageResult>& stages);

// Overall verdict: fail if a required stage failed, a regression was found or, with require_all, a
// required stage was skipped; else pass.
Verdict overall_verdict(const std::vector<StageResult>& stages, const std::vector<Regression>& regressions,
                        bool require_all = false);

// The verdict with what it rests on, as a person reads it: "pass", "pass with 4 required stages
// skipped: weights, alignment, generation, distributed", "fail: 1 required stage failed: weights; 2
// regressions", "pass with 1 warning: target-limits bad_request_5xx". `upper` writes the verdict word in
// capitals (PASS / FAIL), as the text output does.
std::string verdict_text(const Report& report, bool upper = false);

nlohmann::json to_json(const Report& report);
Result<Report> report_from_json(const nlohmann::json& doc);

}  // namespace day0::report
