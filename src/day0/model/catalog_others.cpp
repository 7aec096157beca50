// Llama 3.1 (8B / 70B / 405B), Mixtral (8x7B / 8x22B), GLM-4.5, gpt-oss (120B / 20B) and MiniMax-M2 releases.
#include "day0/model/catalog.h"

namespace day0 {

namespace {

using nlohmann::json;

json llama31(int64_t hidden, int64_t width, int64_t layers, int64_t heads) {
  return {{"architectures", json::array({"LlamaForCausalLM"})},
          {"model_type", "llama"},
          {"vocab_size", 128256},
          {"hidden_size", hidden},
          {"intermediate_size", width},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", 8},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"rope_scaling",
           {{"rope_type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}}},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

json llama31_8b() {
  return llama31(4096, 14336, 32, 32);
}
json llama31_70b() {
  return llama31(8192, 28672, 80, 64);
}
json llama31_405b() {
  return llama31(16384, 53248, 126, 128);
}

json mixtral(int64_t hidden, int64_t width, int64_t layers, int64_t heads, int64_t context) {
  return {{"architectures", json::array({"MixtralForCausalLM"})},
          {"model_type", "mixtral"},
          {"vocab_size", 32000},
          {"hidden_size", hidden},
          {"intermediate_size", width},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", 8},
          {"num_local_experts", 8},
          {"num_experts_per_tok", 2},
          {"max_position_embeddings", context},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 1e6},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

json mixtral_8x7b() {
  return mixtral(4096, 14336, 32, 32, 32768);
}
json mixtral_8x22b() {
  return mixtral(6144, 16384, 56, 48, 65536);
}

json glm45() {
  return {{"architectures", json::array({"Glm4MoeForCausalLM"})},
          {"model_type", "glm4_moe"},
          {"vocab_size", 151552},
          {"hidden_size", 5120},
          {"intermediate_size", 12288},
          {"moe_intermediate_size", 1536},
          {"num_hidden_layers", 92},
          {"num_attention_heads", 96},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"partial_rotary_factor", 0.5},
          {"attention_bias", true},
          {"use_qk_norm", true},
          {"n_routed_experts", 160},
          {"n_shared_experts", 1},
          {"num_experts_per_tok", 8},
          {"first_k_dense_replace", 3},
          {"n_group", 1},
          {"topk_group", 1},
          {"norm_topk_prob", true},
          {"routed_scaling_factor", 2.5},
          {"num_nextn_predict_layers", 1},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 1e6},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

json gpt_oss(int64_t layers, int64_t experts) {
  json types = json::array();
  for (int64_t n = 0; n < layers; ++n) types.push_back(n % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"architectures", json::array({"GptOssForCausalLM"})},
          {"model_type", "gpt_oss"},
          {"vocab_size", 201088},
          {"hidden_size", 2880},
          {"intermediate_size", 2880},
          {"num_hidden_layers", layers},
          {"num_attention_heads", 64},
          {"num_key_value_heads", 8},
          {"head_dim", 64},
          {"num_local_experts", experts},
          {"num_experts_per_tok", 4},
          {"attention_bias", true},
          {"sliding_window", 128},
          {"layer_types", types},
          {"swiglu_limit", 7.0},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 150000},
          {"rope_scaling",
           {{"rope_type", "yarn"},
            {"factor", 32.0},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"original_max_position_embeddings", 4096},
            {"truncate", false}}},
          {"tie_word_embeddings", false},
          {"quantization_config", {{"quant_method", "mxfp4"}}}};
}

// LongCat-Flash (meituan-longcat/LongCat-Flash-Chat) with the LongcatFlashConfig defaults, which are
// the release's: 28 layers of two MLA sublayers, 512 real + 256 zero experts, top-12, BF16.
json longcat_flash() {
  return {{"architectures", json::array({"LongcatFlashForCausalLM"})},
          {"model_type", "longcat_flash"},
          {"vocab_size", 131072},
          {"hidden_size", 6144},
          {"num_layers", 28},
          {"num_attention_heads", 64},
          {"num_key_value_heads", 64},
          {"ffn_hidden_size", 12288},
          {"expert_ffn_hidden_size", 2048},
          {"q_lora_rank", 1536},
          {"kv_lora_rank", 512},
          {"qk_nope_head_dim", 128},
          {"qk_rope_head_dim", 64},
          {"head_dim", 64},
          {"v_head_dim", 128},
          {"n_routed_experts", 512},
          {"zero_expert_num", 256},
          {"zero_expert_type", "identity"},
          {"moe_topk", 12},
          {"routed_scaling_factor", 6.0},
          {"mla_scale_q_lora", true},
          {"mla_scale_kv_lora", true},
          {"router_bias", false},
          {"attention_bias", false},
          {"max_position_embeddings", 131072},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 1e7},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"}};
}

json gpt_oss_120b() {
  return gpt_oss(36, 128);
}
json gpt_oss_20b() {
  return gpt_oss(24, 32);
}

// MiniMax-M2 as released (M2.1 and M2.5 keep every architecture value): FP8 blocks, the router and
// correction bias unquantized.
json minimax_m2() {
  return {{"architectures", json::array({"MiniMaxM2ForCausalLM"})},
          {"model_type", "minimax_m2"},
          {"vocab_size", 200064},
          {"hidden_size", 3072},
          {"intermediate_size", 1536},
          {"num_hidden_layers", 62},
          {"num_attention_heads", 48},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"rotary_dim", 64},
          {"num_local_experts", 256},
          {"num_experts_per_tok", 8},
          {"max_position_embeddings", 196608},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 5e6},
          {"use_qk_norm", true},
          {"qk_norm_type", "per_layer"},
          {"scoring_func", "sigmoid"},
          {"use_routing_bias", true},
          {"shared_intermediate_size", 0},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"quantization_config",
           {{"quant_method", "fp8"},
            {"fmt", "float8_e4m3fn"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}},
            {"modules_to_not_convert", {"gate", "e_score_correction_bias", "lm_head"}}}}};
}

}  // namespace

void add_other_entries(std::vector<CatalogEntry>& out) {
  out.push_back({"glm-4.5", "GLM-4.5: 355B MoE (160 experts, top-8), partial RoPE, BF16",
                 "glm-4.5/config.json", glm45});
  out.push_back({"gpt-oss-120b", "gpt-oss-120b: 128 MXFP4 experts, top-4, sliding/full + sinks",
                 "gpt-oss-120b/config.json", gpt_oss_120b});
  out.push_back({"gpt-oss-20b", "gpt-oss-20b: 32 MXFP4 experts, top-4, sliding/full + sinks",
                 "gpt-oss-20b/config.json", gpt_oss_20b});
  // No release config.json in DAY0_SHARED_DIR/configs (minimax-m2.5 holds a trimmed variant only).
  out.push_back({"minimax-m2", "MiniMax-M2: 230B MoE (256 experts, top-8, sigmoid), full-width q/k norm, FP8",
                 "", minimax_m2});
  out.push_back({"minimax-m2.5", "MiniMax-M2.5: the MiniMax-M2 architecture, FP8 blocks", "", minimax_m2});
  // No release config.json in the release-config folder (DAY0_SHARED_DIR/configs).
  out.push_back({"longcat-flash",
                 "LongCat-Flash: 560B MoE (512 + 256 zero experts, top-12), MLA sublayer pairs, shortcut MoE",
                 "", longcat_flash});
  out.push_back(
      {"mixtral-8x7b", "Mixtral-8x7B: 8 experts, top-2, BF16", "mixtral-8x7b/config.json", mixtral_8x7b});
  out.push_back(
      {"mixtral-8x22b", "Mixtral-8x22B: 8 experts, top-2, BF16", "mixtral-8x22b/config.json", mixtral_8x22b});
  out.push_back({"llama-3.1-8b", "Llama 3.1 8B: dense GQA, llama3 RoPE scaling, BF16",
                 "llama-3.1-8b/config.json", llama31_8b});
  out.push_back({"llama-3.1-70b", "Llama 3.1 70B: dense GQA, llama3 RoPE scaling, BF16",
                 "llama-3.1-70b/config.json", llama31_70b});
  out.push_back({"llama-3.1-405b", "Llama 3.1 405B: dense GQA, llama3 RoPE scaling, BF16",
                 "llama-3.1-405b/config.json", llama31_405b});
}

}  // namespace day0
