#pragma once
// ModelSpec + tensor manifest -> the planner's ModelCost. Parameters and stored bytes come from the
// manifest (the single source of truth); KV, attention math and divisibility counts from the spec.
#include <string>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/tensor_manifest.h"
#include "day0/plan/model_cost.h"

namespace day0::plan {

Result<ModelCost> model_cost_from_spec(const ModelSpec& spec, const TensorManifest& manifest,
                                       const std::string& name);

// MODEL as every subcommand takes it (folder, config.json, catalog name), costed for planning.
Result<ModelCost> load_model_cost(const std::string& model_arg);

}  // namespace day0::plan
