// Qwen3 dense, Qwen3-MoE (235B-A22B, 30B-A3B, Coder 480B-A35B) and Qwen2-MoE 57B-A14B releases.
#include "day0/model/catalog.h"

namespace day0 {

namespace {

using nlohmann::json;

// Keys every Qwen release here shares.
json qwen(json config) {
  config["vocab_size"] = 151936;
  config["rms_norm_eps"] = 1e-6;
  config["tie_word_embeddings"] = false;
  config["torch_dtype"] = "bfloat16";
  config["rope_scaling"] = nullptr;
  return config;
}

json qwen3_moe(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t experts,
               int64_t expert_width, int64_t dense_width, int64_t context, double theta) {
  return qwen({{"architectures", json::array({"Qwen3MoeForCausalLM"})},
               {"model_type", "qwen3_moe"},
               {"hidden_size", hidden},
               {"num_hidden_layers", layers},
               {"num_attention_heads", heads},
               {"num_key_value_heads", kv_heads},
               {"head_dim", 128},
               {"intermediate_size", dense_width},
               {"num_experts", experts},
               {"num_experts_per_tok", 8},
               {"moe_intermediate_size", expert_width},
               {"norm_topk_prob", true},
               {"decoder_sparse_step", 1},
               {"max_position_embeddings", context},
               {"rope_theta", theta}});
}

json qwen3_235b() {
  return qwen3_moe(4096, 94, 64, 4, 128, 1536, 12288, 40960, 1e6);
}
json qwen3_30b() {
  return qwen3_moe(2048, 48, 32, 4, 128, 768, 6144, 40960, 1e6);
}
json qwen3_coder_480b() {
  return qwen3_moe(6144, 62, 96, 8, 160, 2560, 8192, 262144, 1e7);
}

json qwen3_8b() {
  return qwen({{"architectures", json::array({"Qwen3ForCausalLM"})},
               {"model_type", "qwen3"},
               {"hidden_size", 4096},
               {"num_hidden_layers", 36},
               {"num_attention_heads", 32},
               {"num_key_value_heads", 8},
               {"head_dim", 128},
               {"intermediate_size", 12288},
               {"max_position_embeddings", 40960},
               {"rope_theta", 1e6}});
}

json qwen2_57b() {
  return qwen({{"architectures", json::array({"Qwen2MoeForCausalLM"})},
               {"model_type", "qwen2_moe"},
               {"hidden_size", 3584},
               {"num_hidden_layers", 28},
               {"num_attention_heads", 28},
               {"num_key_value_heads", 4},
               {"intermediate_size", 18944},
               {"num_experts", 64},
               {"num_experts_per_tok", 8},
               {"moe_intermediate_size", 2560},
               {"shared_expert_intermediate_size", 20480},
               {"norm_topk_prob", false},
               {"max_position_embeddings", 131072},
               {"rope_theta", 1e6}});
}

// Qwen3-Next-80B-A3B: 48 layers, every 4th gated full attention (12), the others Gated DeltaNet (36);
// 512 experts top-10 with a gated shared expert in every layer. The release's values (no config.json
// in DAY0_SHARED_DIR/configs); the v4 spelling it ships (full_attention_interval, top-level rope keys).
json qwen3_next_80b() {
  json config = qwen({{"architectures", json::array({"Qwen3NextForCausalLM"})},
                      {"model_type", "qwen3_next"},
                      {"hidden_size", 2048},
                      {"num_hidden_layers", 48},
                      {"num_attention_heads", 16},
                      {"num_key_value_heads", 2},
                      {"head_dim", 256},
                      {"intermediate_size", 5120},
                      {"partial_rotary_factor", 0.25},
                      {"attention_bias", false},
                      {"full_attention_interval", 4},
                      {"linear_conv_kernel_dim", 4},
                      {"linear_key_head_dim", 128},
                      {"linear_value_head_dim", 128},
                      {"linear_num_key_heads", 16},
                      {"linear_num_value_heads", 32},
                      {"num_experts", 512},
                      {"num_experts_per_tok", 10},
                      {"moe_intermediate_size", 512},
                      {"shared_expert_intermediate_size", 512},
                      {"norm_topk_prob", true},
                      {"decoder_sparse_step", 1},
                      {"mlp_only_layers", json::array()},
                      {"max_position_embeddings", 262144},
                      {"rope_theta", 1e7}});
  return config;
}

}  // namespace

void add_qwen_entries(std::vector<CatalogEntry>& out) {
  out.push_back({"qwen3-235b-a22b", "Qwen3-235B-A22B: 128 experts, top-8, q/k norm, BF16",
                 "qwen3-235b-a22b/config.json", qwen3_235b});
  out.push_back({"qwen3-30b-a3b", "Qwen3-30B-A3B: 128 experts, top-8, q/k norm, BF16",
                 "qwen3-30b-a3b/config.json", qwen3_30b});
  out.push_back({"qwen3-coder-480b-a35b", "Qwen3-Coder-480B-A35B: 160 experts, top-8, BF16",
                 "qwen3-coder-480b-a35b/config.json", qwen3_coder_480b});
  out.push_back({"qwen3-8b", "Qwen3-8B: dense GQA with q/k norm, BF16", "qwen3-8b/config.json", qwen3_8b});
  // No release config.json in the release-config folder (DAY0_SHARED_DIR/configs).
  out.push_back(
      {"qwen3-next-80b-a3b",
       "Qwen3-Next-80B-A3B: 36 Gated DeltaNet + 12 gated attention layers, 512 experts top-10, BF16", "",
       qwen3_next_80b});
  out.push_back({"qwen2-57b-a14b", "Qwen2-57B-A14B: 64 experts, top-8, gated shared expert, BF16",
                 "qwen2-57b-a14b/config.TRANSCRIBED-from-trtllm-test.json", qwen2_57b});
}

}  // namespace day0
