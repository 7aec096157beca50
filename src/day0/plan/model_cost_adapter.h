#pragma once
// ModelSpec + tensor manifest -> the planner's ModelCost. Parameters and stored bytes come from the
// manifest (the single source of truth); KV, attention math and divisibility counts from the spec.
#include <string>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/tensor_manifest.h"
#include "day0/plan/model_cost.h"

namespace day0::plan {

Result<ModelCost> model_cost_from_spec(const ModelSpec& spec, const TensorManifest& manifest,
                                       const std::string& name);

// A config.json as JSON (a what-if model: a catalog entry's config with keys changed), parsed by its
// family and costed through its weight table, so its parameters are counted where a release's are.
Result<ModelCost> model_cost_from_config(const nlohmann::json& config, const std::string& name);

// MODEL as every subcommand takes it (folder, config.json, catalog name), costed for planning.
Result<ModelCost> load_model_cost(const std::string& model_arg);

}  // namespace day0::plan
