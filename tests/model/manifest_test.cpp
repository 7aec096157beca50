// Exact tensor manifests (names, shapes, dtypes as the release stores them) of one hand-checked
// miniature config per family. The expected lists are written out by hand from
// ../shared/docs/architectures.md, not generated.
#include <gtest/gtest.h>

#include <string>

#include "day0/model/config_parser.h"
#include "day0/model/param_count.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {
namespace {

using nlohmann::json;

std::string render(const TensorManifest& manifest) {
  std::string out;
  for (const auto& t : manifest.tensors) {
    out += t.name + " [";
    for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? ", " : "") + std::to_string(t.shape[i]);
    out += "] " + std::string(dtype_name(t.dtype)) + "\n";
  }
  return out;
}

std::string manifest_of(const json& config) {
  auto spec = parse_model_config(config, "tiny/config.json");
  if (!spec.is_ok()) return "parse failed: " + spec.status().to_string();
  auto manifest = build_tensor_manifest(*spec);
  if (!manifest.is_ok()) return "manifest failed: " + manifest.status().to_string();
  return render(*manifest);
}

// V 16, H 8, 2 heads of 4, 1 KV head, 1 layer, intermediate 12.
json tiny(const char* architecture) {
  return {{"architectures", {architecture}},
          {"vocab_size", 16},
          {"hidden_size", 8},
          {"intermediate_size", 12},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"tie_word_embeddings", false}};
}

TEST(Manifest, Llama) {
  json c = tiny("LlamaForCausalLM");
  c["attention_bias"] = true;
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.q_proj.bias [8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.o_proj.bias [8] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.up_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.down_proj.weight [8, 12] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, MistralTiedHasNoLmHead) {
  json c = tiny("MistralForCausalLM");
  c["tie_word_embeddings"] = true;
  c["torch_dtype"] = "float16";
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] F16\n"
            "model.layers.0.input_layernorm.weight [8] F16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] F16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] F16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] F16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] F16\n"
            "model.layers.0.post_attention_layernorm.weight [8] F16\n"
            "model.layers.0.mlp.gate_proj.weight [12, 8] F16\n"
            "model.layers.0.mlp.up_proj.weight [12, 8] F16\n"
            "model.layers.0.mlp.down_proj.weight [8, 12] F16\n"
            "model.norm.weight [8] F16\n");
}

TEST(Manifest, Qwen2HasQkvBiasOnly) {
  EXPECT_EQ(manifest_of(tiny("Qwen2ForCausalLM")),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.q_proj.bias [8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.up_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.down_proj.weight [8, 12] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, Qwen3ExplicitHeadDimAndQkNorm) {
  json c = tiny("Qwen3ForCausalLM");
  c["head_dim"] = 6;  // decoupled from hidden_size: q_proj is [2 x 6, 8]
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [12, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [6, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [6, 8] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 12] BF16\n"
            "model.layers.0.self_attn.q_norm.weight [6] BF16\n"
            "model.layers.0.self_attn.k_norm.weight [6] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.up_proj.weight [12, 8] BF16\n"
            "model.layers.0.mlp.down_proj.weight [8, 12] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, MixtralPerExpertW1W2W3) {
  json c = tiny("MixtralForCausalLM");
  c["num_local_experts"] = 2;
  c["num_experts_per_tok"] = 1;
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.block_sparse_moe.gate.weight [2, 8] BF16\n"
            "model.layers.0.block_sparse_moe.experts.0.w1.weight [12, 8] BF16\n"
            "model.layers.0.block_sparse_moe.experts.0.w3.weight [12, 8] BF16\n"
            "model.layers.0.block_sparse_moe.experts.0.w2.weight [8, 12] BF16\n"
            "model.layers.0.block_sparse_moe.experts.1.w1.weight [12, 8] BF16\n"
            "model.layers.0.block_sparse_moe.experts.1.w3.weight [12, 8] BF16\n"
            "model.layers.0.block_sparse_moe.experts.1.w2.weight [8, 12] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, Qwen2MoeDenseLayerThenSharedGatedExpert) {
  json c = tiny("Qwen2MoeForCausalLM");
  c["num_hidden_layers"] = 2;
  c["mlp_only_layers"] = {0};
  c["num_experts"] = 2;
  c["num_experts_per_tok"] = 1;
  c["moe_intermediate_size"] = 4;
  c["shared_expert_intermediate_size"] = 10;
  const std::string attention0 =
      "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
      "model.layers.0.self_attn.q_proj.bias [8] BF16\n"
      "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
      "model.layers.0.self_attn.k_proj.bias [4] BF16\n"
      "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
      "model.layers.0.self_attn.v_proj.bias [4] BF16\n"
      "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n";
  std::string attention1 = attention0;
  for (size_t at = attention1.find("layers.0"); at != std::string::npos;
       at = attention1.find("layers.0", at)) {
    attention1.replace(at, 8, "layers.1");
  }
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n" +
                attention0 +
                "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
                "model.layers.0.mlp.gate_proj.weight [12, 8] BF16\n"
                "model.layers.0.mlp.up_proj.weight [12, 8] BF16\n"
                "model.layers.0.mlp.down_proj.weight [8, 12] BF16\n"
                "model.layers.1.input_layernorm.weight [8] BF16\n" +
                attention1 +
                "model.layers.1.post_attention_layernorm.weight [8] BF16\n"
                "model.layers.1.mlp.gate.weight [2, 8] BF16\n"
                "model.layers.1.mlp.experts.0.gate_proj.weight [4, 8] BF16\n"
                "model.layers.1.mlp.experts.0.up_proj.weight [4, 8] BF16\n"
                "model.layers.1.mlp.experts.0.down_proj.weight [8, 4] BF16\n"
                "model.layers.1.mlp.experts.1.gate_proj.weight [4, 8] BF16\n"
                "model.layers.1.mlp.experts.1.up_proj.weight [4, 8] BF16\n"
                "model.layers.1.mlp.experts.1.down_proj.weight [8, 4] BF16\n"
                "model.layers.1.mlp.shared_expert.gate_proj.weight [10, 8] BF16\n"
                "model.layers.1.mlp.shared_expert.up_proj.weight [10, 8] BF16\n"
                "model.layers.1.mlp.shared_expert.down_proj.weight [8, 10] BF16\n"
                "model.layers.1.mlp.shared_expert_gate.weight [1, 8] BF16\n"
                "model.norm.weight [8] BF16\n"
                "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, Qwen3MoeNoSharedExpert) {
  json c = tiny("Qwen3MoeForCausalLM");
  c["head_dim"] = 4;
  c["num_experts"] = 2;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 4;
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.q_norm.weight [4] BF16\n"
            "model.layers.0.self_attn.k_norm.weight [4] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate.weight [2, 8] BF16\n"
            "model.layers.0.mlp.experts.0.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.down_proj.weight [8, 4] BF16\n"
            "model.layers.0.mlp.experts.1.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.down_proj.weight [8, 4] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

// MLA sizes: 2 heads, latent 4, rope 2, nope 2, v 3.
json tiny_mla(const char* architecture) {
  json c = tiny(architecture);
  c["kv_lora_rank"] = 4;
  c["qk_rope_head_dim"] = 2;
  c["qk_nope_head_dim"] = 2;
  c["v_head_dim"] = 3;
  c["n_routed_experts"] = 2;
  c["num_experts_per_tok"] = 1;
  c["moe_intermediate_size"] = 4;
  c["n_shared_experts"] = 1;
  c["n_group"] = 1;
  c["topk_group"] = 1;
  return c;
}

TEST(Manifest, DeepseekV2WithoutQueryCompression) {
  json c = tiny_mla("DeepseekV2ForCausalLM");
  c["q_lora_rank"] = nullptr;
  c["first_k_dense_replace"] = 0;
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"  // 2 heads x (2 + 2)
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight [6, 8] BF16\n"
            "model.layers.0.self_attn.kv_a_layernorm.weight [4] BF16\n"
            "model.layers.0.self_attn.kv_b_proj.weight [10, 4] BF16\n"  // 2 x (2 + 3)
            "model.layers.0.self_attn.o_proj.weight [8, 6] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate.weight [2, 8] BF16\n"
            "model.layers.0.mlp.experts.0.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.down_proj.weight [8, 4] BF16\n"
            "model.layers.0.mlp.experts.1.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.down_proj.weight [8, 4] BF16\n"
            "model.layers.0.mlp.shared_experts.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.shared_experts.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.shared_experts.down_proj.weight [8, 4] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, DeepseekV3Fp8BlockScales) {
  json c = tiny_mla("DeepseekV3ForCausalLM");
  c["q_lora_rank"] = 6;
  c["first_k_dense_replace"] = 1;
  c["num_hidden_layers"] = 2;
  c["num_nextn_predict_layers"] = 1;
  c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {4, 4}}};
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_a_proj.weight [6, 8] F8_E4M3\n"
            "model.layers.0.self_attn.q_a_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.0.self_attn.q_a_layernorm.weight [6] BF16\n"
            "model.layers.0.self_attn.q_b_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.0.self_attn.q_b_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight [6, 8] F8_E4M3\n"
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv [2, 2] F32\n"
            "model.layers.0.self_attn.kv_a_layernorm.weight [4] BF16\n"
            "model.layers.0.self_attn.kv_b_proj.weight [10, 4] F8_E4M3\n"
            "model.layers.0.self_attn.kv_b_proj.weight_scale_inv [3, 1] F32\n"
            "model.layers.0.self_attn.o_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.0.self_attn.o_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate_proj.weight [12, 8] F8_E4M3\n"
            "model.layers.0.mlp.gate_proj.weight_scale_inv [3, 2] F32\n"
            "model.layers.0.mlp.up_proj.weight [12, 8] F8_E4M3\n"
            "model.layers.0.mlp.up_proj.weight_scale_inv [3, 2] F32\n"
            "model.layers.0.mlp.down_proj.weight [8, 12] F8_E4M3\n"
            "model.layers.0.mlp.down_proj.weight_scale_inv [2, 3] F32\n"
            "model.layers.1.input_layernorm.weight [8] BF16\n"
            "model.layers.1.self_attn.q_a_proj.weight [6, 8] F8_E4M3\n"
            "model.layers.1.self_attn.q_a_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.1.self_attn.q_a_layernorm.weight [6] BF16\n"
            "model.layers.1.self_attn.q_b_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.1.self_attn.q_b_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.1.self_attn.kv_a_proj_with_mqa.weight [6, 8] F8_E4M3\n"
            "model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv [2, 2] F32\n"
            "model.layers.1.self_attn.kv_a_layernorm.weight [4] BF16\n"
            "model.layers.1.self_attn.kv_b_proj.weight [10, 4] F8_E4M3\n"
            "model.layers.1.self_attn.kv_b_proj.weight_scale_inv [3, 1] F32\n"
            "model.layers.1.self_attn.o_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.1.self_attn.o_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.1.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.1.mlp.gate.weight [2, 8] BF16\n"
            "model.layers.1.mlp.gate.e_score_correction_bias [2] F32\n"
            "model.layers.1.mlp.experts.0.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.experts.0.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.experts.0.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.experts.0.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.experts.0.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv [2, 1] F32\n"
            "model.layers.1.mlp.experts.1.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.experts.1.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.experts.1.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.experts.1.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.experts.1.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.1.mlp.experts.1.down_proj.weight_scale_inv [2, 1] F32\n"
            "model.layers.1.mlp.shared_experts.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.shared_experts.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.shared_experts.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.1.mlp.shared_experts.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.1.mlp.shared_experts.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.1.mlp.shared_experts.down_proj.weight_scale_inv [2, 1] F32\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n"
            // The MTP layer declared by num_nextn_predict_layers: its own embedding, norms, eh_proj
            // and head, then a decoder layer like the last one.
            "model.layers.2.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.2.enorm.weight [8] BF16\n"
            "model.layers.2.hnorm.weight [8] BF16\n"
            "model.layers.2.eh_proj.weight [8, 16] F8_E4M3\n"
            "model.layers.2.eh_proj.weight_scale_inv [2, 4] F32\n"
            "model.layers.2.shared_head.norm.weight [8] BF16\n"
            "model.layers.2.shared_head.head.weight [16, 8] BF16\n"
            "model.layers.2.input_layernorm.weight [8] BF16\n"
            "model.layers.2.self_attn.q_a_proj.weight [6, 8] F8_E4M3\n"
            "model.layers.2.self_attn.q_a_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.2.self_attn.q_a_layernorm.weight [6] BF16\n"
            "model.layers.2.self_attn.q_b_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.2.self_attn.q_b_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.2.self_attn.kv_a_proj_with_mqa.weight [6, 8] F8_E4M3\n"
            "model.layers.2.self_attn.kv_a_proj_with_mqa.weight_scale_inv [2, 2] F32\n"
            "model.layers.2.self_attn.kv_a_layernorm.weight [4] BF16\n"
            "model.layers.2.self_attn.kv_b_proj.weight [10, 4] F8_E4M3\n"
            "model.layers.2.self_attn.kv_b_proj.weight_scale_inv [3, 1] F32\n"
            "model.layers.2.self_attn.o_proj.weight [8, 6] F8_E4M3\n"
            "model.layers.2.self_attn.o_proj.weight_scale_inv [2, 2] F32\n"
            "model.layers.2.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.2.mlp.gate.weight [2, 8] BF16\n"
            "model.layers.2.mlp.gate.e_score_correction_bias [2] F32\n"
            "model.layers.2.mlp.experts.0.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.experts.0.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.experts.0.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.experts.0.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.experts.0.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.2.mlp.experts.0.down_proj.weight_scale_inv [2, 1] F32\n"
            "model.layers.2.mlp.experts.1.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.experts.1.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.experts.1.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.experts.1.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.experts.1.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.2.mlp.experts.1.down_proj.weight_scale_inv [2, 1] F32\n"
            "model.layers.2.mlp.shared_experts.gate_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.shared_experts.gate_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.shared_experts.up_proj.weight [4, 8] F8_E4M3\n"
            "model.layers.2.mlp.shared_experts.up_proj.weight_scale_inv [1, 2] F32\n"
            "model.layers.2.mlp.shared_experts.down_proj.weight [8, 4] F8_E4M3\n"
            "model.layers.2.mlp.shared_experts.down_proj.weight_scale_inv [2, 1] F32\n");
  auto spec = parse_model_config(c, "tiny");
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->n_mtp_layers, 1);
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok());
  ModelSpec without = *spec;
  without.n_mtp_layers = 0;
  auto main_only = build_tensor_manifest(without);
  ASSERT_TRUE(main_only.is_ok());
  for (const auto& t : manifest->tensors) EXPECT_EQ(t.mtp, t.layer == 2) << t.name;
  // MTP tensors are verified, never counted as the model's parameters.
  auto counts = count_params(*spec, *manifest);
  auto counts_main = count_params(without, *main_only);
  ASSERT_TRUE(counts.is_ok() && counts_main.is_ok());
  EXPECT_EQ(counts->total, counts_main->total);
  EXPECT_EQ(counts->stored_bytes, counts_main->stored_bytes);
}

TEST(Manifest, Glm4MoeBiasQkNormAndSharedExperts) {
  json c = tiny("Glm4MoeForCausalLM");
  c["head_dim"] = 4;
  c["attention_bias"] = true;
  c["use_qk_norm"] = true;
  c["n_routed_experts"] = 2;
  c["num_experts_per_tok"] = 1;
  c["moe_intermediate_size"] = 4;
  c["n_shared_experts"] = 1;
  c["first_k_dense_replace"] = 0;
  EXPECT_EQ(manifest_of(c),
            "model.embed_tokens.weight [16, 8] BF16\n"
            "model.layers.0.input_layernorm.weight [8] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.q_proj.bias [8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.k_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "model.layers.0.self_attn.v_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "model.layers.0.self_attn.q_norm.weight [4] BF16\n"
            "model.layers.0.self_attn.k_norm.weight [4] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "model.layers.0.mlp.gate.weight [2, 8] BF16\n"
            "model.layers.0.mlp.gate.e_score_correction_bias [2] F32\n"
            "model.layers.0.mlp.experts.0.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.0.down_proj.weight [8, 4] BF16\n"
            "model.layers.0.mlp.experts.1.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.experts.1.down_proj.weight [8, 4] BF16\n"
            "model.layers.0.mlp.shared_experts.gate_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.shared_experts.up_proj.weight [4, 8] BF16\n"
            "model.layers.0.mlp.shared_experts.down_proj.weight [8, 4] BF16\n"
            "model.norm.weight [8] BF16\n"
            "lm_head.weight [16, 8] BF16\n");
}

TEST(Manifest, GptOssMxfp4BlocksScalesAndBiases) {
  json c = tiny("GptOssForCausalLM");
  c["hidden_size"] = 64;
  c["intermediate_size"] = 32;
  c["head_dim"] = 4;
  c["num_local_experts"] = 2;
  c["num_experts_per_tok"] = 1;
  c["quantization_config"] = {{"quant_method", "mxfp4"}};
  const std::string text = manifest_of(c);
  EXPECT_EQ(text,
            "model.embed_tokens.weight [16, 64] BF16\n"
            "model.layers.0.input_layernorm.weight [64] BF16\n"
            "model.layers.0.self_attn.q_proj.weight [8, 64] BF16\n"
            "model.layers.0.self_attn.q_proj.bias [8] BF16\n"
            "model.layers.0.self_attn.k_proj.weight [4, 64] BF16\n"
            "model.layers.0.self_attn.k_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.v_proj.weight [4, 64] BF16\n"
            "model.layers.0.self_attn.v_proj.bias [4] BF16\n"
            "model.layers.0.self_attn.o_proj.weight [64, 8] BF16\n"
            "model.layers.0.self_attn.o_proj.bias [64] BF16\n"
            "model.layers.0.self_attn.sinks [2] BF16\n"
            "model.layers.0.post_attention_layernorm.weight [64] BF16\n"
            "model.layers.0.mlp.router.weight [2, 64] BF16\n"
            "model.layers.0.mlp.router.bias [2] BF16\n"
            "model.layers.0.mlp.experts.gate_up_proj_blocks [2, 64, 2, 16] U8\n"
            "model.layers.0.mlp.experts.gate_up_proj_scales [2, 64, 2] U8\n"
            "model.layers.0.mlp.experts.gate_up_proj_bias [2, 64] BF16\n"
            "model.layers.0.mlp.experts.down_proj_blocks [2, 64, 1, 16] U8\n"
            "model.layers.0.mlp.experts.down_proj_scales [2, 64, 1] U8\n"
            "model.layers.0.mlp.experts.down_proj_bias [2, 64] BF16\n"
            "model.norm.weight [64] BF16\n"
            "lm_head.weight [16, 64] BF16\n");
  // Blocks hold two parameters a byte, scales none: experts = 2 x (64 x 64 + 64 x 32) weights + biases.
  auto spec = parse_model_config(c, "tiny");
  ASSERT_TRUE(spec.is_ok());
  auto counts = count_params(*spec);
  ASSERT_TRUE(counts.is_ok());
  EXPECT_EQ(counts->routed_experts, 2 * (64 * 64 + 64 * 32) + 2 * 64 + 2 * 64);
  EXPECT_EQ(counts->routed_experts_active, counts->routed_experts / 2);
}

TEST(Manifest, Llama4FusedExpertsUnderLanguageModel) {
  json text = tiny("Llama4ForCausalLM");
  text.erase("architectures");
  text["num_hidden_layers"] = 2;
  text["head_dim"] = 4;
  text["interleave_moe_layer_step"] = 2;
  text["num_local_experts"] = 2;
  text["intermediate_size"] = 4;
  text["intermediate_size_mlp"] = 12;
  json c = {
      {"architectures", {"Llama4ForConditionalGeneration"}}, {"model_type", "llama4"}, {"text_config", text}};
  EXPECT_EQ(manifest_of(c),
            "language_model.model.embed_tokens.weight [16, 8] BF16\n"
            "language_model.model.layers.0.input_layernorm.weight [8] BF16\n"
            "language_model.model.layers.0.self_attn.q_proj.weight [8, 8] BF16\n"
            "language_model.model.layers.0.self_attn.k_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.0.self_attn.v_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.0.self_attn.o_proj.weight [8, 8] BF16\n"
            "language_model.model.layers.0.post_attention_layernorm.weight [8] BF16\n"
            "language_model.model.layers.0.feed_forward.gate_proj.weight [12, 8] BF16\n"
            "language_model.model.layers.0.feed_forward.up_proj.weight [12, 8] BF16\n"
            "language_model.model.layers.0.feed_forward.down_proj.weight [8, 12] BF16\n"
            "language_model.model.layers.1.input_layernorm.weight [8] BF16\n"
            "language_model.model.layers.1.self_attn.q_proj.weight [8, 8] BF16\n"
            "language_model.model.layers.1.self_attn.k_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.1.self_attn.v_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.1.self_attn.o_proj.weight [8, 8] BF16\n"
            "language_model.model.layers.1.post_attention_layernorm.weight [8] BF16\n"
            "language_model.model.layers.1.feed_forward.router.weight [2, 8] BF16\n"
            "language_model.model.layers.1.feed_forward.experts.gate_up_proj [2, 8, 8] BF16\n"
            "language_model.model.layers.1.feed_forward.experts.down_proj [2, 4, 8] BF16\n"
            "language_model.model.layers.1.feed_forward.shared_expert.gate_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.1.feed_forward.shared_expert.up_proj.weight [4, 8] BF16\n"
            "language_model.model.layers.1.feed_forward.shared_expert.down_proj.weight [8, 4] BF16\n"
            "language_model.model.norm.weight [8] BF16\n"
            "language_model.lm_head.weight [16, 8] BF16\n");
}

}  // namespace
}  // namespace day0
