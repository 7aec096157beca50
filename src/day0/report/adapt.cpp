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

#include "day0/core/error.h"
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
      {{"plan", "Parallel plan"}, run_plan_stage},
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
  std::ifstream in(path);
  if (!in) return io_error(path + ": cannot read the report to compare against");
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return parse_error(path + ": not valid JSON");
  auto report = report_from_json(doc);
  if (!report.is_ok()) return report.status().with_context(path);
  return report;
}

// Scratch folders of earlier runs that were killed (SIGINT, SIGKILL) before they could clean up.
void remove_stale_scratch(const std::filesystem::path& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("day0-adapt-", 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + 11, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
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

Result<Report> run_adapt(const AdaptOptions& options,
                         const std::function<void(const StageResult&)>& on_stage) {
  for (const auto& id : options.optional_stages) {
    const auto& stages = adapt_stages();
    if (std::none_of(stages.begin(), stages.end(), [&](const StageDescriptor& d) { return d.id == id; })) {
      return invalid_argument("--optional: unknown stage \"" + id +
                              "\" (stages: structure, coverage, weights, miniature, alignment, plan, "
                              "performance, stability)");
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
  std::error_code ec;
  remove_stale_scratch(std::filesystem::temp_directory_path());
  ctx.work_dir = std::filesystem::temp_directory_path() / fmt::format("day0-adapt-{}", getpid());
  std::filesystem::remove_all(ctx.work_dir, ec);
  std::filesystem::create_directories(ctx.work_dir, ec);
  if (ec) return io_error(ctx.work_dir.string() + ": cannot create the scratch folder: " + ec.message());

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
  if (ctx.model) report.family = family_name(ctx.model->spec.family);
  std::filesystem::remove_all(ctx.work_dir, ec);

  if (old_report)
    report.regressions = compare_reports(*old_report, report, default_metric_rules(options.margins));
  report.verdict = overall_verdict(report.stages, report.regressions);
  return report;
}

}  // namespace day0::report
