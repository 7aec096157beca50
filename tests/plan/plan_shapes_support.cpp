#include "plan_shapes.h"

#include <gtest/gtest.h>

#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/synth/miniature.h"

namespace day0::plan::testing {

nlohmann::json bf16_config(const std::string& catalog_name) {
  const CatalogEntry* entry = find_catalog_entry(catalog_name);
  EXPECT_NE(entry, nullptr) << catalog_name << " is not in the catalog";
  if (entry == nullptr) return nlohmann::json::object();
  nlohmann::json config = entry->config;
  config.erase("quantization_config");
  return config;
}

ModelCost cost_of(const nlohmann::json& config, const std::string& name) {
  auto cost = model_cost_from_config(config, name);
  EXPECT_TRUE(cost.is_ok()) << name << ": " << cost.status().to_string();
  return cost.is_ok() ? *cost : ModelCost{};
}

ModelCost deepseek_v3() {
  return cost_of(bf16_config("deepseek-v3"), "deepseek-v3");
}

ModelCost kimi_k2() {
  return cost_of(bf16_config("kimi-k2"), "kimi-k2");
}

ModelCost llama31_8b() {
  return cost_of(bf16_config("llama-3.1-8b"), "llama-3.1-8b");
}

ModelCost llama31_70b() {
  return cost_of(bf16_config("llama-3.1-70b"), "llama-3.1-70b");
}

ModelCost three_trillion() {
  nlohmann::json config = bf16_config("deepseek-v3");
  config["num_hidden_layers"] = 66;
  config["first_k_dense_replace"] = 2;
  config["n_routed_experts"] = 1024;
  config["moe_intermediate_size"] = 2112;
  return cost_of(config, "hypothetical-3t");
}

namespace {

// What `day0 synth CATALOG_NAME --layers ... --seed N` writes, costed.
ModelCost synthesised(const std::string& catalog_name, const MiniatureOptions& options,
                      const std::string& name) {
  auto full = catalog_model(catalog_name);
  EXPECT_TRUE(full.is_ok()) << catalog_name << ": " << full.status().to_string();
  if (!full.is_ok()) return {};
  auto spec = make_miniature_spec(*full, options);
  EXPECT_TRUE(spec.is_ok()) << name << ": " << spec.status().to_string();
  if (!spec.is_ok()) return {};
  auto manifest = build_tensor_manifest(*spec);
  EXPECT_TRUE(manifest.is_ok()) << name << ": " << manifest.status().to_string();
  if (!manifest.is_ok()) return {};
  auto cost = model_cost_from_spec(*spec, *manifest, name);
  EXPECT_TRUE(cost.is_ok()) << name << ": " << cost.status().to_string();
  return cost.is_ok() ? *cost : ModelCost{};
}

}  // namespace

ModelCost bench_dense_1b(int64_t vocab) {
  // bench/e2e.sh: synth llama-3.1-8b --layers 16 --hidden 2048 --heads 32 --head-dim 64
  //   --intermediate 8192 --vocab 32000
  return synthesised(
      "llama-3.1-8b",
      {.layers = 16, .hidden = 2048, .heads = 32, .head_dim = 64, .intermediate = 8192, .vocab = vocab},
      "bench-dense-1b");
}

ModelCost bench_moe_a02b() {
  // bench/e2e.sh: synth qwen3-30b-a3b --layers 12 --hidden 1024 --heads 16 --head-dim 128 --experts 64
  //   --experts-per-token 8 --expert-intermediate 512 --vocab 32000
  return synthesised("qwen3-30b-a3b",
                     {.layers = 12,
                      .hidden = 1024,
                      .heads = 16,
                      .head_dim = 128,
                      .experts = 64,
                      .experts_per_token = 8,
                      .expert_intermediate = 512,
                      .vocab = 32000},
                     "bench-moe-a02b");
}

}  // namespace day0::plan::testing
