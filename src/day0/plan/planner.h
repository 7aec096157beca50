#pragma once
// The planner: enumerates TP x PP x DP x EP layouts of a model on a cluster, keeps those whose degrees
// divide the model and tile the nodes, costs their memory and time, and ranks the ones that fit. A
// library function: `day0 plan` prints it, `report`/`adapt` call it for "this machine".
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/plan/cluster.h"
#include "day0/plan/estimate.h"
#include "day0/plan/model_cost.h"
#include "day0/plan/workload.h"

namespace day0::plan {

struct PlanCandidate {
  Parallelism par;
  MemoryEstimate memory;
  TimeEstimate time;  // only costed for feasible plans
  bool feasible = false;
};

// A layout refused before costing: its degrees and why.
struct StructuralRejection {
  Parallelism par;
  std::string reason;
};

struct PlanResult {
  std::vector<PlanCandidate> feasible;          // best first under the workload's objective
  std::vector<PlanCandidate> over_memory;       // least overflow first
  std::vector<StructuralRejection> structural;  // examples, at most a few per kind of reason
  int64_t n_structural = 0;                     // every layout refused before costing
  int64_t n_costed = 0;
  // Fewest devices of any feasible layout, and that layout (the smallest deployment unit).
  std::optional<PlanCandidate> smallest_unit;
  // When nothing fits: the smallest cluster of the same nodes that holds the model, and its unit.
  std::optional<ClusterSpec> smallest_cluster;
  std::optional<PlanCandidate> smallest_cluster_unit;
};

struct PlanOptions {
  int64_t max_grow_nodes = 512;  // how far to grow the cluster looking for one that fits
  bool grow_when_infeasible = true;
};

// Plans `model` on `cluster` for `workload`. Fails only on bad input (workload out of range, a model
// without layers); "fits nowhere" is a result (empty `feasible`, `smallest_cluster` set when found).
Result<PlanResult> plan_model(const ModelCost& model, const ClusterSpec& cluster, const Workload& workload,
                              const PlanOptions& options = {});

// Why a costed plan does not fit: "needs 95.3 GB a device (stage 0), has 85.9 GB: over by 9.4 GB; ...".
std::string over_memory_reason(const PlanCandidate& candidate, const Workload& workload);

}  // namespace day0::plan
