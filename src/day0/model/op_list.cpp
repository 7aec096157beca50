#include "day0/model/op_list.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "day0/model/model_memory.h"
#include "day0/ops/op_names.h"

namespace day0 {

double OpList::total_flops_per_token() const {
  double total = 0;
  for (const auto& op : ops) total += op.flops_per_token;
  return total;
}

double OpList::total_bytes_per_token() const {
  double total = 0;
  for (const auto& op : ops) total += op.bytes_per_token;
  return total;
}

namespace {

// Collects ops in forward order and merges an op that repeats in another layer with the same name,
// label, attributes and shapes into one entry with more calls.
class OpListBuilder {
 public:
  OpListBuilder(const ModelSpec& spec, int64_t context) : spec_(spec), context_(context) {}

  void add(std::string_view name, std::string label, std::map<std::string, std::string> attrs,
           std::vector<std::vector<int64_t>> shapes, int64_t calls, double flops_per_call,
           double bytes_per_call, DType weight_dtype = DType::kBF16) {
    OpSpec op;
    op.name = std::string(name);
    op.label = std::move(label);
    op.attrs = std::move(attrs);
    op.activation_dtype = spec_.activation_dtype;
    op.weight_dtype = weight_dtype;
    op.shapes = std::move(shapes);
    for (auto& existing : list_.ops) {
      if (existing.name == op.name && existing.label == op.label && existing.attrs == op.attrs &&
          existing.shapes == op.shapes && existing.weight_dtype == op.weight_dtype) {
        existing.calls_per_token += calls;
        existing.flops_per_token += flops_per_call * static_cast<double>(calls);
        existing.bytes_per_token += bytes_per_call * static_cast<double>(calls);
        return;
      }
    }
    op.calls_per_token = calls;
    op.flops_per_token = flops_per_call * static_cast<double>(calls);
    op.bytes_per_token = bytes_per_call * static_cast<double>(calls);
    list_.ops.push_back(std::move(op));
  }

  // y = x W^T (+ b) with W [out, in] stored in the checkpoint's format when `quantizable`.
  void matmul(std::string label, int64_t out, int64_t in, bool bias, bool quantizable, int64_t calls = 1,
              bool mxfp4 = false) {
    std::map<std::string, std::string> attrs;
    DType dtype = spec_.activation_dtype;
    double bytes = static_cast<double>(out) * static_cast<double>(in) * dtype_bits(dtype) / 8.0;
    if (mxfp4) {
      dtype = DType::kU8;
      attrs["weight_dtype"] = "mxfp4";
      attrs["weight_layout"] = "blocks_32_e8m0";
      bytes = static_cast<double>(out) * static_cast<double>(in) * (0.5 + 1.0 / 32.0);
    } else if (quantizable && spec_.weights.format == WeightFormat::kFp8Block) {
      dtype = DType::kF8E4M3;
      attrs["weight_dtype"] = std::string(dtype_name(dtype));
      attrs["weight_layout"] = fmt::format("block_{}x{}", spec_.weights.block_rows, spec_.weights.block_cols);
      const double scales =
          std::ceil(static_cast<double>(out) / static_cast<double>(spec_.weights.block_rows)) *
          std::ceil(static_cast<double>(in) / static_cast<double>(spec_.weights.block_cols));
      bytes = static_cast<double>(out) * static_cast<double>(in) + 4.0 * scales;
    } else {
      attrs["weight_dtype"] = std::string(dtype_name(dtype));
    }
    if (bias) {
      attrs["bias"] = "true";
      bytes += static_cast<double>(out) * dtype_bits(spec_.activation_dtype) / 8.0;
    }
    add(op::kMatmul, std::move(label), std::move(attrs), {{out, in}}, calls,
        2.0 * static_cast<double>(out) * static_cast<double>(in), bytes, dtype);
  }

  void norm(std::string label, int64_t rows, int64_t dim, bool weighted = true) {
    std::map<std::string, std::string> attrs = {{"eps", fmt::format("{:g}", spec_.rms_norm_eps)}};
    if (!weighted) attrs["weight"] = "none";
    const double bytes = weighted ? static_cast<double>(dim) * dtype_bits(spec_.activation_dtype) / 8.0 : 0.0;
    add(op::kRmsNorm, std::move(label), std::move(attrs), {{rows, dim}}, 1,
        4.0 * static_cast<double>(rows) * static_cast<double>(dim), bytes);
  }

  void elementwise(std::string_view name, std::string label, int64_t n,
                   std::map<std::string, std::string> attrs = {}, int64_t calls = 1,
                   double flops_per_element = 1.0) {
    add(name, std::move(label), std::move(attrs), {{n}}, calls, flops_per_element * static_cast<double>(n),
        0.0);
  }

  int64_t context() const { return context_; }
  OpList take() {
    list_.context_tokens = context_;
    return std::move(list_);
  }

 private:
  const ModelSpec& spec_;
  int64_t context_;
  OpList list_;
};

std::string layout_name(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? "interleaved" : "half_split";
}

void add_rope(OpListBuilder& b, const ModelSpec& s, int64_t heads, int64_t rotary_dim, std::string label) {
  std::map<std::string, std::string> attrs = {{"layout", layout_name(s.rope_layout)},
                                              {"rotary_dim", std::to_string(rotary_dim)},
                                              {"scaling", rope_type_name(s.rope.type)}};
  b.add(op::kRope, std::move(label), std::move(attrs), {{heads, rotary_dim}}, 1,
        3.0 * static_cast<double>(heads) * static_cast<double>(rotary_dim), 0.0);
}

void add_gqa_layer(OpListBuilder& b, const ModelSpec& s, const LayerSpec& layer) {
  const int64_t H = s.hidden_size, d = s.head_dim, q_out = s.n_heads * d, kv_out = s.n_kv_heads * d;
  b.matmul("attn.q_proj", q_out, H, s.qkv_bias, true);
  b.matmul("attn.k_proj", kv_out, H, s.qkv_bias, true);
  b.matmul("attn.v_proj", kv_out, H, s.qkv_bias, true);
  if (s.qk_norm) {
    b.norm("attn.q_norm", s.n_heads, d);
    b.norm("attn.k_norm", s.n_kv_heads, d);
  }
  if (layer.use_rope) {
    const auto rotary = static_cast<int64_t>(static_cast<double>(d) * s.partial_rotary_factor);
    add_rope(b, s, s.n_heads + s.n_kv_heads, rotary, "attn.rope");
    if (s.qk_norm_weightless_after_rope) {
      b.norm("attn.q_l2_norm", s.n_heads, d, false);
      b.norm("attn.k_l2_norm", s.n_kv_heads, d, false);
    }
  } else if (s.attn_temperature_tuning) {
    b.elementwise(op::kMul, "attn.temperature_tuning", q_out,
                  {{"floor_scale", std::to_string(s.floor_scale)}});
  }
  int64_t keys = b.context() + 1;
  if (layer.mask != AttentionMask::kCausal && layer.window > 0) keys = std::min(keys, layer.window);
  std::map<std::string, std::string> attrs = {{"mask", attention_mask_name(layer.mask)},
                                              {"groups", std::to_string(s.n_heads / s.n_kv_heads)},
                                              {"scale", fmt::format("{:.6g}", s.attention_scale)}};
  if (layer.mask != AttentionMask::kCausal) attrs["window"] = std::to_string(layer.window);
  if (s.attention_sinks) attrs["sinks"] = "true";
  const double flops =
      4.0 * static_cast<double>(s.n_heads) * static_cast<double>(d) * static_cast<double>(keys);
  const double kv_bytes = static_cast<double>(kv_bytes_per_token_per_layer(s)) * static_cast<double>(keys);
  b.add(op::kAttention, "attn.attention", std::move(attrs),
        {{s.n_heads, d}, {s.n_kv_heads, d}, {s.n_kv_heads, d}}, 1, flops, kv_bytes);
  b.matmul("attn.o_proj", H, q_out, s.o_bias, true);
}

void add_mla_layer(OpListBuilder& b, const ModelSpec& s) {
  const MlaSpec& m = *s.mla;
  const int64_t H = s.hidden_size, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.q_lora_rank > 0) {
    b.matmul("attn.q_a_proj", m.q_lora_rank, H, s.qkv_bias, true);
    b.norm("attn.q_a_layernorm", 1, m.q_lora_rank);
    b.matmul("attn.q_b_proj", s.n_heads * qk, m.q_lora_rank, false, true);
  } else {
    b.matmul("attn.q_proj", s.n_heads * qk, H, false, true);
  }
  b.matmul("attn.kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, H, s.qkv_bias, true);
  b.norm("attn.kv_a_layernorm", 1, m.kv_lora_rank);
  add_rope(b, s, s.n_heads + 1, m.qk_rope_head_dim, "attn.rope");
  // Decode absorbs kv_b_proj: W_UK into the query, W_UV after the latent attention; the FLOPs are
  // those of one pass over the weight.
  b.matmul("attn.kv_b_proj(absorbed)", s.n_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, false,
           true);
  const auto keys = static_cast<double>(b.context() + 1);
  const double flops = 2.0 * static_cast<double>(s.n_heads) * keys *
                       static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank);
  const double kv_bytes = static_cast<double>(kv_bytes_per_token_per_layer(s)) * keys;
  std::map<std::string, std::string> attrs = {{"mask", "causal"},
                                              {"kv_lora_rank", std::to_string(m.kv_lora_rank)},
                                              {"rope_dim", std::to_string(m.qk_rope_head_dim)},
                                              {"form", "absorbed"},
                                              {"scale", fmt::format("{:.6g}", s.attention_scale)}};
  b.add(op::kMlaAttention, "attn.mla", std::move(attrs),
        {{s.n_heads, m.kv_lora_rank + m.qk_rope_head_dim}, {1, m.kv_lora_rank + m.qk_rope_head_dim}}, 1,
        flops, kv_bytes);
  b.matmul("attn.o_proj", H, s.n_heads * m.v_head_dim, s.o_bias, true);
}

void add_dense_ffn(OpListBuilder& b, const ModelSpec& s, int64_t width) {
  const int64_t H = s.hidden_size;
  b.matmul("mlp.gate_proj", width, H, s.mlp_bias, true);
  b.matmul("mlp.up_proj", width, H, s.mlp_bias, true);
  b.elementwise(op::kSwiglu, "mlp.swiglu", width, {}, 1, 5.0);
  b.matmul("mlp.down_proj", H, width, s.mlp_bias, true);
}

void add_moe_ffn(OpListBuilder& b, const ModelSpec& s) {
  const MoeSpec& m = *s.moe;
  const int64_t H = s.hidden_size, I = m.expert_intermediate, k = m.experts_per_token;
  b.matmul("moe.router", m.n_experts, H, m.router_bias, false);
  std::map<std::string, std::string> router = {
      {"scoring", m.scoring == RouterScoring::kSigmoid ? "sigmoid" : "softmax"},
      {"topk_method", topk_method_name(m.topk_method)},
      {"n_experts", std::to_string(m.n_experts)},
      {"top_k", std::to_string(k)}};
  if (m.n_group > 1) router["groups"] = fmt::format("{}/{}", m.topk_group, m.n_group);
  if (m.correction_bias) router["correction_bias"] = "true";
  if (m.norm_topk_prob) router["renormalize"] = "true";
  if (m.routed_scaling_factor != 1.0)
    router["routed_scaling_factor"] = fmt::format("{:g}", m.routed_scaling_factor);
  b.elementwise(op::kMoeRouter, "moe.select", m.n_experts, router, 1, 4.0);
  const bool mxfp4 = s.weights.format == WeightFormat::kMxfp4;
  b.matmul("moe.experts.gate_up_proj", 2 * I, H, m.expert_bias, true, k, mxfp4);
  if (m.swiglu_limit > 0.0) {
    b.elementwise(op::kSwigluClamped, "moe.experts.swiglu", I,
                  {{"limit", fmt::format("{:g}", m.swiglu_limit)},
                   {"alpha", fmt::format("{:g}", m.swiglu_alpha)},
                   {"layout", "interleaved"}},
                  k, 8.0);
  } else {
    b.elementwise(op::kSwiglu, "moe.experts.swiglu", I, {}, k, 5.0);
  }
  b.matmul("moe.experts.down_proj", H, I, m.expert_bias, true, k, mxfp4);
  std::map<std::string, std::string> combine = {{"top_k", std::to_string(k)}};
  if (m.topk_method == TopkMethod::kLogitsThenSigmoid) combine["input_scaling"] = "true";
  b.elementwise(op::kMoeExperts, "moe.dispatch_combine", H, combine, 1, 2.0 * static_cast<double>(k));
  if (m.shared_intermediate > 0) {
    b.matmul("moe.shared.gate_up_proj", 2 * m.shared_intermediate, H, false, true);
    b.elementwise(op::kSwiglu, "moe.shared.swiglu", m.shared_intermediate, {}, 1, 5.0);
    b.matmul("moe.shared.down_proj", H, m.shared_intermediate, false, true);
    if (m.shared_expert_gate) {
      b.matmul("moe.shared.gate", 1, H, false, false);
      b.elementwise(op::kSigmoid, "moe.shared.gate_sigmoid", 1);
      b.elementwise(op::kMul, "moe.shared.gate_mul", H);
    }
    b.elementwise(op::kAdd, "moe.shared.add", H);
  }
}

}  // namespace

Result<OpList> build_op_list(const ModelSpec& s, int64_t context_tokens) {
  if (context_tokens < 0) return invalid_argument("op list: context_tokens must be >= 0");
  if (static_cast<int64_t>(s.layers.size()) != s.n_layers) {
    return invalid_argument("op list: the spec's layer list does not match num_hidden_layers");
  }
  OpListBuilder b(s, context_tokens);
  const int64_t H = s.hidden_size;
  b.add(op::kEmbedding, "embed_tokens", {}, {{s.vocab_size, H}}, 1, 0.0,
        static_cast<double>(H) * dtype_bits(s.activation_dtype) / 8.0);
  for (const auto& layer : s.layers) {
    b.norm("input_layernorm", 1, H);
    if (s.attention == AttentionKind::kMla) {
      add_mla_layer(b, s);
    } else {
      add_gqa_layer(b, s, layer);
    }
    b.elementwise(op::kAdd, "attn.residual", H);
    b.norm("post_attention_layernorm", 1, H);
    if (layer.moe) {
      add_moe_ffn(b, s);
    } else {
      add_dense_ffn(b, s, layer.dense_intermediate);
    }
    b.elementwise(op::kAdd, "ffn.residual", H);
  }
  b.norm("final_norm", 1, H);
  b.matmul("lm_head", s.vocab_size, H, false, false);
  b.elementwise(op::kArgmax, "argmax", s.vocab_size);
  return b.take();
}

}  // namespace day0
