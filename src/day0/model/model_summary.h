#pragma once
// Everything `day0 inspect` reports about a model, computed once, with a JSON form other reports
// (adapt, plan) can embed.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/layer_recipe.h"
#include "day0/model/model_memory.h"
#include "day0/model/model_spec.h"
#include "day0/model/op_list.h"
#include "day0/model/param_count.h"

namespace day0 {

struct ModelSummary {
  ModelSpec spec;
  std::string source;  // config path or "catalog:<name>"
  ParamCounts params;
  int64_t n_tensors = 0;
  std::vector<WeightMemoryRow> weight_memory;
  KvCacheSummary kv_cache;
  OpList ops;
  // The layers' recipes (layer_recipe.h), layers of the same recipe together in layer order.
  struct RecipeGroup {
    std::vector<int64_t> layers;
    LayerRecipe recipe;
  };
  std::vector<RecipeGroup> recipes;
};

// `ops`: the model's recorded operator list (runtime/op_recording.h: record_op_list), which needs the
// engine and so is recorded by the caller.
Result<ModelSummary> summarize_model(const ModelSpec& spec, std::string source, OpList ops);

// "0-2", "3-60", "0-34 every 2", "1, 5, 9" (long lists cut with "...").
std::string describe_layer_indices(const std::vector<int64_t>& indices);
// One-line descriptions used by the human report.
std::string describe_attention(const ModelSpec& spec);
std::string describe_rope(const ModelSpec& spec);
std::string describe_moe(const ModelSpec& spec);
std::string describe_weights(const ModelSpec& spec);

nlohmann::json spec_to_json(const ModelSpec& spec);
nlohmann::json summary_to_json(const ModelSummary& summary);

}  // namespace day0
