// Weight memory, KV-cache sizes and the operator list against figures worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/model_memory.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"
#include "day0/runtime/op_recording.h"
#include "model_test_support.h"

namespace day0 {
namespace {

ModelSpec catalog(const char* name) {
  return testing::catalog_spec(name);
}

TEST(WeightMemory, ThreeTrillionParameters) {
  ParamCounts counts;
  counts.total = 3'000'000'000'000;
  counts.stored_bytes = 3'100'000'000'000;
  ModelSpec spec;
  spec.weights.format = WeightFormat::kFp8Block;
  const auto rows = weight_memory_table(spec, counts);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].format, "FP32");
  EXPECT_EQ(rows[0].bytes, 12'000'000'000'000u);
  EXPECT_EQ(rows[1].bytes, 6'000'000'000'000u);
  EXPECT_EQ(rows[2].bytes, 3'000'000'000'000u);
  EXPECT_EQ(rows[3].bytes, 3'000'000'000'000u);
  EXPECT_EQ(rows[4].bytes, 1'500'000'000'000u);
  EXPECT_EQ(rows[5].bytes, 3'100'000'000'000u);  // the checkpoint's own bytes
}

TEST(KvCache, PerTokenFiguresOfArchitecturesMd) {
  // MLA: (512 + 64) x 2 B x 61 layers.
  EXPECT_EQ(kv_cache_summary(catalog("deepseek-v3")).bytes_per_token, 70'272u);
  EXPECT_EQ(kv_cache_summary(catalog("kimi-k2")).bytes_per_token, 70'272u);
  // GQA: 2 x 8 KV heads x 128 x 2 B x 32 / 80 layers.
  EXPECT_EQ(kv_cache_summary(catalog("llama-3.1-8b")).bytes_per_token, 131'072u);
  EXPECT_EQ(kv_cache_summary(catalog("llama-3.1-70b")).bytes_per_token, 327'680u);
  EXPECT_EQ(kv_cache_summary(catalog("gpt-oss-120b")).bytes_per_token, 73'728u);
}

TEST(KvCache, SlidingLayersAreBoundedByTheirWindow) {
  const ModelSpec spec = catalog("gpt-oss-120b");
  // 18 full layers hold 1,000 tokens, 18 sliding layers 128; 2,048 B a layer and token.
  EXPECT_EQ(kv_cache_summary(spec).bytes_per_1k_tokens, 2048u * (18u * 1000u + 18u * 128u));
  EXPECT_EQ(kv_cache_bytes(spec, 100), 2048u * 36u * 100u);  // below the window nothing is cut
  const ModelSpec dense = catalog("llama-3.1-8b");
  EXPECT_EQ(kv_cache_summary(dense).bytes_per_1k_tokens, 131'072u * 1000u);
}

// Every weight a matmul-like kernel multiplies by (matmul, the experts of moe_experts, MLA's absorbed
// kv_b_proj) is read once per decoded token, so the recorded matmul FLOPs are twice the active
// parameters that are not the embedding lookup, norms or other vectors: the recorded kernel arguments
// against the parameter count of the weight table.
TEST(OpList, MatmulFlopsAreTwiceTheActiveMatmulParameters) {
  struct Case {
    const char* name;
    int64_t non_matmul;  // active parameters that are not matmul weights besides norms
  };
  for (const Case c : {Case{"llama-3.1-8b", 0}, Case{"qwen3-30b-a3b", 0}, Case{"mixtral-8x7b", 0},
                       Case{"deepseek-v3", 58 * 256}}) {  // e_score_correction_bias of 58 MoE layers
    SCOPED_TRACE(c.name);
    const ModelSpec spec = catalog(c.name);
    auto counts = count_params(spec);
    auto ops = record_op_list(spec, 0);
    ASSERT_TRUE(counts.is_ok() && ops.is_ok()) << ops.status().to_string();
    double matmul = 0;
    for (const auto& op : ops->ops) matmul += op.matmul_flops_per_token;
    EXPECT_DOUBLE_EQ(
        matmul, 2.0 * static_cast<double>(counts->active_without_embedding - counts->norms - c.non_matmul));
  }
}

// The recorded list of every catalog model names only registry ops; gpt-oss's paged attention is
// costed over its window on sliding layers and over the whole context on full ones.
TEST(OpList, UsesOnlyRegistryOpNamesAndBoundsSlidingAttention) {
  for (const auto& entry : model_catalog()) {
    const ModelSpec spec = catalog(entry.name.c_str());
    auto ops = record_op_list(spec);
    if (!unimplemented_mechanisms(spec).empty()) {  // not run yet: refused by name, no list
      EXPECT_EQ(ops.status().code(), StatusCode::kUnsupported) << entry.name;
      continue;
    }
    ASSERT_TRUE(ops.is_ok()) << entry.name << ": " << ops.status().to_string();
    for (const auto& op : ops->ops) {
      EXPECT_NE(find_op_schema(op.name), nullptr) << entry.name << ": " << op.name;
      EXPECT_TRUE(op.prefill || op.decode) << entry.name << ": " << op.name;
    }
  }
  auto ops = record_op_list(catalog("gpt-oss-20b"), 4096);
  ASSERT_TRUE(ops.is_ok());
  int attention_entries = 0;
  for (const auto& op : ops->ops) {
    if (op.name != op::kPagedAttention) continue;
    ++attention_entries;
    EXPECT_EQ(op.attrs.at("sinks"), "true");
    EXPECT_EQ(op.attrs.at("kv_dtype"), "bf16");
    EXPECT_EQ(op.calls_per_token, 12);
    // 12 layers x 2 x 64 heads x keys x (64 + 64): 128 keys on sliding layers, 4,097 on full ones;
    // the BF16 cache row is 2 x 8 KV heads x 64 x 2 B.
    const double keys = op.attrs.at("mask") == "sliding" ? 128.0 : 4097.0;
    EXPECT_DOUBLE_EQ(op.flops_per_token, 12 * 2.0 * 64 * keys * 128);
    EXPECT_DOUBLE_EQ(op.bytes_per_token, 12 * keys * 2048);
  }
  EXPECT_EQ(attention_entries, 2);
}

// Weight formats come from the bound weights: DeepSeek-V3's experts are FP8 blocks behind a BF16
// router, one moe_experts call per MoE layer reading top-8 experts; gpt-oss's experts are MXFP4. MLA
// runs naive in the prefill step only and absorbed in the decode step.
TEST(OpList, WeightFormatsAndMlaFormsAreRecorded) {
  auto ds = record_op_list(catalog("deepseek-v3"));
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  bool fp8_experts = false, router = false, naive = false, absorbed = false;
  for (const auto& op : ds->ops) {
    if (op.name == op::kMoeExperts) {
      fp8_experts = op.weights == WeightFormat::kFp8Block && op.calls_per_token == 58 &&
                    op.attrs.at("top_k") == "8" && op.label == "mlp.experts" &&
                    op.attrs.at("block") == "128x128";
    }
    if (op.label == "mlp.gate") router = op.name == op::kMatmul && op.weights == WeightFormat::kBF16;
    if (op.name == op::kPagedMlaAttention && op.attrs.at("form") == "naive") {
      naive = op.prefill && !op.decode && op.calls_per_token == 0;
    }
    if (op.name == op::kPagedMlaAttention && op.attrs.at("form") == "absorbed") {
      absorbed = op.decode && !op.prefill && op.calls_per_token == 61 && op.label == "self_attn.kv_b_proj";
    }
  }
  EXPECT_TRUE(fp8_experts);
  EXPECT_TRUE(router);
  EXPECT_TRUE(naive);
  EXPECT_TRUE(absorbed);
  auto oss = record_op_list(catalog("gpt-oss-120b"));
  ASSERT_TRUE(oss.is_ok());
  bool mxfp4 = false;
  for (const auto& op : oss->ops)
    mxfp4 = mxfp4 || (op.name == op::kMoeExperts && op.weights == WeightFormat::kMxfp4);
  EXPECT_TRUE(mxfp4);
}

TEST(AttentionScale, MlaIncludesTheYarnMscaleSquared) {
  // (1/sqrt(192)) x (0.1 ln 40 + 1)^2 = 0.135234 (architectures.md 6.2).
  EXPECT_NEAR(catalog("deepseek-v3").attention_scale, 0.135234, 5e-7);
  EXPECT_NEAR(catalog("kimi-k2").attention_scale, (1.0 / std::sqrt(192.0)) * 1.813260, 5e-7);
  EXPECT_DOUBLE_EQ(catalog("llama-3.1-8b").attention_scale, 1.0 / std::sqrt(128.0));
  EXPECT_DOUBLE_EQ(catalog("gpt-oss-20b").attention_scale, 0.125);
}

// Configs the catalog does not cover also survive to_hf_config and back.
TEST(ToHfConfig, RoundTripsFamiliesOutsideTheCatalog) {
  using nlohmann::json;
  const json base = {{"vocab_size", 64},       {"hidden_size", 32},        {"intermediate_size", 48},
                     {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  std::vector<json> configs;
  json mistral = base;
  mistral["architectures"] = {"MistralForCausalLM"};  // sliding_window absent: 4096 on every layer
  configs.push_back(mistral);
  json qwen2 = base;
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["use_sliding_window"] = true;
  qwen2["sliding_window"] = 16;
  qwen2["max_window_layers"] = 2;
  qwen2["tie_word_embeddings"] = true;
  configs.push_back(qwen2);
  json llama = base;
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  llama["mlp_bias"] = true;
  configs.push_back(llama);
  json llama_yarn = llama;
  llama_yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.2}};
  configs.push_back(llama_yarn);
  json llama4 = base;
  llama4["head_dim"] = 8;
  llama4["num_local_experts"] = 4;
  llama4["interleave_moe_layer_step"] = 2;
  llama4["intermediate_size_mlp"] = 40;
  configs.push_back({{"architectures", {"Llama4ForConditionalGeneration"}}, {"text_config", llama4}});
  json llama4_text = llama4;
  llama4_text["architectures"] = {"Llama4ForCausalLM"};
  configs.push_back(llama4_text);
  for (const auto& config : configs) {
    SCOPED_TRACE(config.dump());
    auto spec = parse_model_config(config, "test");
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    auto again = parse_model_config(to_hf_config(*spec), "written");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_TRUE(*again == *spec) << to_hf_config(*spec).dump(2);
  }
}

TEST(ToHfConfig, NativeModelTypeForKimi) {
  const ModelSpec kimi = catalog("kimi-k2");
  EXPECT_EQ(to_hf_config(kimi)["model_type"], "kimi_k2");
  const auto native = to_hf_config(kimi, {.native_model_type = true});
  EXPECT_EQ(native["model_type"], "deepseek_v3");
  EXPECT_EQ(native["architectures"][0], "DeepseekV3ForCausalLM");
  EXPECT_EQ(native["quantization_config"]["weight_block_size"], nlohmann::json::array({128, 128}));
  auto back = parse_model_config(native, "native");
  ASSERT_TRUE(back.is_ok());
  ModelSpec expected = kimi;
  expected.model_type = "deepseek_v3";
  EXPECT_TRUE(*back == expected);
}

}  // namespace
}  // namespace day0
