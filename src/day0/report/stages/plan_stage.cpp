// Stage 6: the parallel plan for --cluster (default: this machine; the embedded default model is
// planned for an 8xH200 node, where its FP8 release is served publicly).
#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/plan/launch.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/plan/plan_report.h"
#include "day0/plan/planner.h"
#include "day0/plan/presets.h"
#include "day0/report/adapt_context.h"

namespace day0::report {

void run_plan_stage(AdaptContext& ctx, StageResult& out) {
  if (!ctx.model) return stage_skip(out, "the structure stage did not resolve the model");
  std::string cluster_arg = ctx.options.cluster;
  if (cluster_arg.empty() && ctx.options.model == kDefaultAdaptModel) cluster_arg = "8xH200";
  auto cluster = cluster_arg.empty() ? plan::detect_local_cluster() : plan::resolve_cluster(cluster_arg);
  if (!cluster.is_ok()) return stage_fail(out, cluster.status().to_string());
  auto manifest = build_tensor_manifest(ctx.model->spec);
  if (!manifest.is_ok()) return stage_fail(out, manifest.status().to_string());
  auto cost = plan::model_cost_from_spec(ctx.model->spec, *manifest, ctx.options.model);
  if (!cost.is_ok()) return stage_fail(out, cost.status().to_string());
  plan::Workload workload;
  auto result = plan::plan_model(*cost, *cluster, workload);
  if (!result.is_ok()) return stage_fail(out, result.status().to_string());

  plan::PlanReportInput input;
  input.model = &*cost;
  input.cluster = &*cluster;
  input.workload = &workload;
  input.result = &*result;
  input.model_arg = ctx.options.model;
  input.top = 3;
  input.explain_limit = 0;
  const std::string cluster_name = cluster_arg.empty() ? "this machine" : cluster_arg;
  out.evidence = {{"cluster", cluster_name}, {"plan", plan::plan_to_json(input)}};
  if (result->feasible.empty()) {
    std::string reason = fmt::format("does not fit {}", cluster_name);
    if (!result->over_memory.empty())
      reason += ": " + plan::over_memory_reason(result->over_memory.front(), workload);
    if (result->smallest_cluster) {
      reason += fmt::format("; smallest cluster that holds it: {}",
                            plan::cluster_shape_name(*result->smallest_cluster));
    }
    return stage_fail(out, reason);
  }
  // The best layout Day0's runtime can launch (a faster one it cannot run yet is named beside it).
  const plan::PlanCandidate* runnable = nullptr;
  for (const plan::PlanCandidate& c : result->feasible) {
    if (plan::runtime_layout(c.par).not_runnable.empty()) {
      runnable = &c;
      break;
    }
  }
  const plan::PlanCandidate& best = runnable != nullptr ? *runnable : result->feasible.front();
  if (&best != &result->feasible.front()) {
    const plan::Parallelism& f = result->feasible.front().par;
    out.evidence["faster_layout_not_runnable"] = {{"tp", f.tp},
                                                  {"pp", f.pp},
                                                  {"dp", f.dp},
                                                  {"ep", f.ep},
                                                  {"reason", plan::runtime_layout(f).not_runnable}};
  }
  nlohmann::json memory = nlohmann::json::object();
  for (int i = 0; i < plan::kMemoryItems; ++i) {
    const double bytes = best.memory.items[static_cast<size_t>(i)];
    if (bytes > 0) memory[plan::memory_item_name(static_cast<plan::MemoryItem>(i))] = bytes;
  }
  out.evidence["memory_per_device"] = memory;
  out.evidence["device_memory_bytes"] = best.memory.capacity;
  std::string launch = plan::launch_line(best, ctx.options.model, workload, *cluster);
  if (launch.empty()) launch = "not runnable by day0 yet: " + plan::runtime_layout(best.par).not_runnable;
  out.evidence["launch"] = launch;
  std::string faster;
  if (&best != &result->feasible.front()) {
    const plan::PlanCandidate& f = result->feasible.front();
    faster = fmt::format("; faster but not runnable by day0 yet: TP {} x PP {} x DP {}, EP {} (TPOT {})",
                         f.par.tp, f.par.pp, f.par.dp, f.par.ep, human_seconds(f.time.tpot));
  }
  stage_pass(
      out, fmt::format("{}: {} — {} of {} a device, TTFT {}, TPOT {}, {:.0f} tok/s at {} sequences{}",
                       cluster_name, launch, human_bytes(best.memory.total),
                       human_bytes(best.memory.capacity), human_seconds(best.time.ttft),
                       human_seconds(best.time.tpot), best.time.tokens_per_s, workload.concurrency, faster));
}

}  // namespace day0::report
