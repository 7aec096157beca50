// DeepSeek-V2 / V2-Lite / V3 / R1 / V3.2 and Kimi K2: MLA + DeepSeekMoE releases.
#include "day0/model/catalog.h"

namespace day0 {

namespace {

using nlohmann::json;

json fp8_block_128() {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size", json::array({128, 128})}};
}

json yarn(double factor, double mscale, double beta_fast) {
  return {{"type", "yarn"},          {"factor", factor}, {"original_max_position_embeddings", 4096},
          {"beta_fast", beta_fast},  {"beta_slow", 1.0}, {"mscale", mscale},
          {"mscale_all_dim", mscale}};
}

// The MLA dimensions shared by every DeepSeek release and Kimi K2 (only V2-Lite drops q_lora).
json mla(json config) {
  config["kv_lora_rank"] = 512;
  config["qk_nope_head_dim"] = 128;
  config["qk_rope_head_dim"] = 64;
  config["v_head_dim"] = 128;
  config["rms_norm_eps"] = 1e-6;
  config["rope_theta"] = 10000;
  config["tie_word_embeddings"] = false;
  config["torch_dtype"] = "bfloat16";
  return config;
}

json deepseek_v3() {
  return mla({{"architectures", json::array({"DeepseekV3ForCausalLM"})},
              {"model_type", "deepseek_v3"},
              {"vocab_size", 129280},
              {"hidden_size", 7168},
              {"intermediate_size", 18432},
              {"moe_intermediate_size", 2048},
              {"num_hidden_layers", 61},
              {"num_attention_heads", 128},
              {"num_key_value_heads", 128},
              {"q_lora_rank", 1536},
              {"n_routed_experts", 256},
              {"n_shared_experts", 1},
              {"num_experts_per_tok", 8},
              {"first_k_dense_replace", 3},
              {"n_group", 8},
              {"topk_group", 4},
              {"topk_method", "noaux_tc"},
              {"scoring_func", "sigmoid"},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"num_nextn_predict_layers", 1},
              {"max_position_embeddings", 163840},
              {"rope_scaling", yarn(40, 1.0, 32)},
              {"quantization_config", fp8_block_128()}});
}

json kimi_k2() {
  json config = deepseek_v3();
  config["model_type"] = "kimi_k2";
  config["vocab_size"] = 163840;
  config["num_attention_heads"] = 64;
  config["num_key_value_heads"] = 64;
  config["n_routed_experts"] = 384;
  config["first_k_dense_replace"] = 1;
  config["n_group"] = 1;
  config["topk_group"] = 1;
  config["routed_scaling_factor"] = 2.827;
  config["num_nextn_predict_layers"] = 0;
  config["max_position_embeddings"] = 131072;
  config["rope_theta"] = 50000.0;
  config["rope_scaling"] = yarn(32, 1.0, 1.0);
  return config;
}

json deepseek_v2() {
  return mla({{"architectures", json::array({"DeepseekV2ForCausalLM"})},
              {"model_type", "deepseek_v2"},
              {"vocab_size", 102400},
              {"hidden_size", 5120},
              {"intermediate_size", 12288},
              {"moe_intermediate_size", 1536},
              {"num_hidden_layers", 60},
              {"num_attention_heads", 128},
              {"num_key_value_heads", 128},
              {"q_lora_rank", 1536},
              {"n_routed_experts", 160},
              {"n_shared_experts", 2},
              {"num_experts_per_tok", 6},
              {"first_k_dense_replace", 1},
              {"n_group", 8},
              {"topk_group", 3},
              {"topk_method", "group_limited_greedy"},
              {"scoring_func", "softmax"},
              {"norm_topk_prob", false},
              {"routed_scaling_factor", 16.0},
              {"max_position_embeddings", 163840},
              {"rope_scaling", yarn(40, 0.707, 32)}});
}

// DeepSeek-V2-Lite: no query compression, 64 experts without groups (values of the release).
json deepseek_v2_lite() {
  return mla({{"architectures", json::array({"DeepseekV2ForCausalLM"})},
              {"model_type", "deepseek_v2"},
              {"vocab_size", 102400},
              {"hidden_size", 2048},
              {"intermediate_size", 10944},
              {"moe_intermediate_size", 1408},
              {"num_hidden_layers", 27},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 16},
              {"q_lora_rank", nullptr},
              {"n_routed_experts", 64},
              {"n_shared_experts", 2},
              {"num_experts_per_tok", 6},
              {"first_k_dense_replace", 1},
              {"n_group", 1},
              {"topk_group", 1},
              {"topk_method", "greedy"},
              {"scoring_func", "softmax"},
              {"norm_topk_prob", false},
              {"routed_scaling_factor", 1.0},
              {"max_position_embeddings", 163840},
              {"rope_scaling", yarn(40, 0.707, 32)}});
}

}  // namespace

// DeepSeek-V3.2(-Exp): V3's sizes plus the DSA lightning indexer (64 heads of 128, top-2048); FP8
// blocks with power-of-two (ue8m0) scales.
json deepseek_v32() {
  json config = deepseek_v3();
  config["architectures"] = json::array({"DeepseekV32ForCausalLM"});
  config["model_type"] = "deepseek_v32";
  config["index_n_heads"] = 64;
  config["index_head_dim"] = 128;
  config["index_topk"] = 2048;
  config["quantization_config"]["scale_fmt"] = "ue8m0";
  return config;
}

void add_deepseek_entries(std::vector<CatalogEntry>& out) {
  out.push_back({"deepseek-v3", "DeepSeek-V3: 671B MLA + MoE (256 experts, top-8), FP8 block weights",
                 "deepseek-v3/config.json", deepseek_v3});
  out.push_back({"deepseek-r1", "DeepSeek-R1: the DeepSeek-V3 architecture, reasoning-tuned",
                 "deepseek-r1/config.json", deepseek_v3});
  // No release config.json in the release-config folder (DAY0_SHARED_DIR/configs).
  out.push_back({"deepseek-v3.2",
                 "DeepSeek-V3.2: DeepSeek-V3 + DeepSeek Sparse Attention (lightning indexer, top-2048), FP8",
                 "", deepseek_v32});
  out.push_back({"kimi-k2", "Kimi K2: 1T DeepSeek-V3 architecture, 384 experts, FP8 block weights",
                 "kimi-k2/config.json", kimi_k2});
  out.push_back({"deepseek-v2", "DeepSeek-V2: 236B MLA + MoE (160 experts, top-6), BF16",
                 "deepseek-v2/config.TRANSCRIBED-from-megatron-bridge-test.json", deepseek_v2});
  out.push_back({"deepseek-v2-lite", "DeepSeek-V2-Lite: 16B MLA + MoE (64 experts, top-6), BF16", "",
                 deepseek_v2_lite});
}

}  // namespace day0
