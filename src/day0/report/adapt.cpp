#include "day0/report/adapt.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "day0/audit/audit.h"
#include "day0/core/atomic_file.h"
#include "day0/core/error.h"
#include "day0/core/json_reader.h"
#include "day0/report/adapt_context.h"
#include "day0/report/machine_info.h"

namespace day0::report {

namespace {

struct StageEntry {
  StageDescriptor descriptor;
  StageFunction run;
};

const std::vector<StageEntry>& stage_table() {
  static const std::vector<StageEntry> table = {
      {{"structure", "Structure"}, run_structure_stage},
      {{"coverage", "Operator coverage"}, run_coverage_stage},
      {{"weights", "Weights"}, run_weights_stage},
      {{"miniature", "Miniature smoke test"}, run_miniature_stage},
      {{"alignment", "Precision alignment"}, run_alignment_stage},
      {{"generation", "Generation spot checks"}, run_generation_stage},
      {{"plan", "Parallel plan"}, run_plan_stage},
      {{"distributed", "Distributed smoke test"}, run_distributed_stage},
      {{"performance", "Performance"}, run_performance_stage},
      {{"stability", "Stability soak"}, run_stability_stage},
  };
  return table;
}

std::string utc_now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::chrono::system_clock::to_time_t(now)));
}

Result<Report> load_report(const std::string& path) {
  D0_ASSIGN_OR_RETURN(nlohmann::json doc, read_json_file(path, JsonLimits{size_t{64} << 20, 32}));
  auto report = report_from_json(doc);
  if (!report.is_ok()) return report.status().with_context(path);
  return report;
}

}  // namespace

const std::vector<StageDescriptor>& adapt_stages() {
  static const std::vector<StageDescriptor> descriptors = [] {
    std::vector<StageDescriptor> out;
    for (const auto& entry : stage_table()) out.push_back(entry.descriptor);
    return out;
  }();
  return descriptors;
}

std::vector<StageDescriptor> adapt_stages_for(const AdaptOptions& options) {
  std::vector<StageDescriptor> out = adapt_stages();
  if (!options.target.empty())
    for (const auto& d : audit::audit_stages()) out.push_back({d.id, d.title});
  return out;
}

Result<Report> run_adapt(const AdaptOptions& options,
                         const std::function<void(const StageResult&)>& on_stage) {
  for (const auto& id : options.optional_stages) {
    const auto stages = adapt_stages_for(options);
    if (std::none_of(stages.begin(), stages.end(), [&](const StageDescriptor& d) { return d.id == id; })) {
      std::string names;
      for (const auto& d : stages) names += (names.empty() ? "" : ", ") + d.id;
      return invalid_argument("--optional: unknown stage \"" + id + "\" (stages: " + names + ")");
    }
  }
  std::optional<Report> old_report;
  if (!options.compare_path.empty()) {
    D0_ASSIGN_OR_RETURN(Report loaded, load_report(options.compare_path));
    old_report = std::move(loaded);
  }

  Report report;
  report.model = options.model;
  report.day0_version = DAY0_VERSION;
  report.created_at = utc_now_iso8601();
  report.backend = options.backend;
  report.machine = to_json(read_machine_info());

  AdaptContext ctx{options};
  // Scratch from mkdtemp (unpredictable, private to this run), removed on every exit path and on
  // SIGINT/SIGTERM; what a SIGKILL left behind is removed by the next run.
  const auto tmp_root = std::filesystem::temp_directory_path();
  remove_stale_temps(tmp_root, "day0-adapt");
  D0_ASSIGN_OR_RETURN(TempDir scratch, TempDir::create(tmp_root, "day0-adapt"));
  ctx.work_dir = scratch.path();

  for (const auto& entry : stage_table()) {
    StageResult stage;
    stage.id = entry.descriptor.id;
    stage.title = entry.descriptor.title;
    stage.required = std::find(options.optional_stages.begin(), options.optional_stages.end(), stage.id) ==
                     options.optional_stages.end();
    const auto start = std::chrono::steady_clock::now();
    try {
      entry.run(ctx, stage);
    } catch (const std::exception& e) {
      // A bug inside a stage fails that stage with the reason; the run and the report go on.
      stage_fail(stage, std::string("internal error: ") + e.what());
    }
    stage.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_stage) on_stage(stage);
    report.stages.push_back(std::move(stage));
  }
  if (ctx.model) report.family = ctx.model->spec.family;

  if (!options.target.empty()) {
    audit::AuditOptions ao;
    ao.model = options.model;
    ao.target = options.target;
    ao.served_model_name = options.served_model_name;
    ao.api_key = options.target_api_key;
    ao.concurrency = options.target_concurrency;
    ao.soak_seconds = options.target_soak_seconds;
    ao.target_format = options.target_format;
    ao.quantized_reference = options.quantized_reference;
    const size_t first = report.stages.size();
    auto session = audit::open_audit(ao);
    if (session.is_ok()) {
      audit::run_audit_stages(**session, report.stages, on_stage);
    } else {
      // Without the reference or the target no audit stage can judge: each fails with the reason.
      for (const auto& d : audit::audit_stages()) {
        StageResult stage;
        stage.id = d.id;
        stage.title = d.title;
        stage_fail(stage,
                   "the audit of " + options.target + " could not start: " + session.status().to_string());
        if (on_stage) on_stage(stage);
        report.stages.push_back(std::move(stage));
      }
    }
    for (size_t i = first; i < report.stages.size(); ++i) {
      auto& st = report.stages[i];
      st.required = std::find(options.optional_stages.begin(), options.optional_stages.end(), st.id) ==
                    options.optional_stages.end();
    }
  }

  if (old_report)
    report.regressions = compare_reports(*old_report, report, default_metric_rules(options.margins));
  report.strict = options.strict;
  if (report.strict) apply_strict(report.stages);
  report.skipped_required = skipped_required_stages(report.stages);
  report.require_all = options.require_all;
  report.verdict = overall_verdict(report.stages, report.regressions, options.require_all);
  return report;
}

}  // namespace day0::report
