#pragma once
// A PlanResult as an aligned human report and as JSON, with the caveats every estimate carries.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/plan/cluster.h"
#include "day0/plan/launch.h"
#include "day0/plan/model_cost.h"
#include "day0/plan/planner.h"
#include "day0/plan/workload.h"

namespace day0::plan {

struct PlanReportInput {
  const ModelCost* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const Workload* workload = nullptr;
  const PlanResult* result = nullptr;
  std::string model_arg;  // as the user named the model (goes into the launch line)
  Launcher launcher = Launcher::kMpirun;
  int top = 5;
  bool explain = false;  // list rejected layouts with their reasons
  int explain_limit = 20;
};

// What the estimates leave out, one sentence each.
const std::vector<std::string>& estimate_caveats();

std::string format_plan_text(const PlanReportInput& in);
nlohmann::json plan_to_json(const PlanReportInput& in);

}  // namespace day0::plan
