#include "day0/model/tensor_manifest.h"

#include <fmt/format.h>

#include "day0/core/checked_math.h"

namespace day0 {

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding:
      return "embedding";
    case TensorRole::kLmHead:
      return "lm_head";
    case TensorRole::kNorm:
      return "norm";
    case TensorRole::kAttention:
      return "attention";
    case TensorRole::kDenseMlp:
      return "dense_mlp";
    case TensorRole::kRouter:
      return "router";
    case TensorRole::kRoutedExpert:
      return "routed_expert";
    case TensorRole::kSharedExpert:
      return "shared_expert";
    case TensorRole::kQuantScale:
      return "quant_scale";
  }
  return "unknown";
}

std::string decoder_prefix(const ModelSpec& spec) {
  return spec.multimodal_wrapper ? "language_model.model." : "model.";
}

namespace {

// Upper bound on the tensors we are willing to list (Kimi K2 with FP8 scales holds ~140k).
constexpr int64_t kMaxTensors = 20'000'000;

enum class Kind {
  kPlain,       // activation dtype, never quantized (norms, biases, embeddings, routers)
  kProjection,  // a linear weight [out, in]; FP8 block checkpoints store it quantized
  kF32,         // kept in fp32 (e_score_correction_bias)
};

class ManifestBuilder {
 public:
  explicit ManifestBuilder(const ModelSpec& spec) : spec_(spec) {}

  void add(std::string name, std::vector<int64_t> shape, TensorRole role, Kind kind = Kind::kPlain,
           int64_t expert = -1) {
    const bool fp8 = kind == Kind::kProjection && spec_.weights.format == WeightFormat::kFp8Block;
    DType dtype = fp8 ? DType::kF8E4M3 : kind == Kind::kF32 ? DType::kF32 : spec_.activation_dtype;
    std::vector<int64_t> scale_shape;
    if (fp8) {
      scale_shape = {ceil_div(shape[0], spec_.weights.block_rows),
                     ceil_div(shape[1], spec_.weights.block_cols)};
    }
    const int64_t params = push(name, std::move(shape), dtype, role, expert, /*params_per_element=*/1);
    (void)params;
    if (fp8)
      push(name + "_scale_inv", std::move(scale_shape), DType::kF32, TensorRole::kQuantScale, expert, 0);
  }

  // A tensor whose logical parameter count differs from its element count (MXFP4 blocks hold two
  // 4-bit values a byte; scales hold none).
  void add_raw(std::string name, std::vector<int64_t> shape, DType dtype, TensorRole role,
               int64_t params_per_element) {
    push(std::move(name), std::move(shape), dtype, role, -1, params_per_element);
  }

  void set_layer(int64_t layer) { layer_ = layer; }
  Status status() const { return status_; }
  TensorManifest take() { return std::move(manifest_); }

 private:
  static int64_t ceil_div(int64_t a, int64_t b) { return b <= 0 ? 0 : (a + b - 1) / b; }

  int64_t push(std::string name, std::vector<int64_t> shape, DType dtype, TensorRole role, int64_t expert,
               int64_t params_per_element) {
    if (!status_.is_ok()) return 0;
    const auto elements = checked_product(shape);
    const auto params =
        elements ? checked_mul(*elements, static_cast<uint64_t>(params_per_element)) : std::nullopt;
    const auto bits =
        elements ? checked_mul(*elements, static_cast<uint64_t>(dtype_bits(dtype))) : std::nullopt;
    if (!elements || !params || !bits || *params > static_cast<uint64_t>(INT64_MAX)) {
      status_ = out_of_range(
          fmt::format("tensor {}: its size overflows 64 bits; the config's sizes are too large", name));
      return 0;
    }
    TensorSpec t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.role = role;
    t.layer = layer_;
    t.expert = expert;
    t.params = static_cast<int64_t>(*params);
    t.bytes = (*bits + 7) / 8;
    manifest_.tensors.push_back(std::move(t));
    return manifest_.tensors.back().params;
  }

  const ModelSpec& spec_;
  int64_t layer_ = -1;
  Status status_;
  TensorManifest manifest_;
};

void add_swiglu(ManifestBuilder& b, const std::string& prefix, int64_t width, int64_t hidden, TensorRole role,
                bool bias, int64_t expert = -1, const char* gate = "gate_proj", const char* up = "up_proj",
                const char* down = "down_proj") {
  b.add(prefix + gate + ".weight", {width, hidden}, role, Kind::kProjection, expert);
  if (bias) b.add(prefix + gate + ".bias", {width}, role, Kind::kPlain, expert);
  b.add(prefix + up + ".weight", {width, hidden}, role, Kind::kProjection, expert);
  if (bias) b.add(prefix + up + ".bias", {width}, role, Kind::kPlain, expert);
  b.add(prefix + down + ".weight", {hidden, width}, role, Kind::kProjection, expert);
  if (bias) b.add(prefix + down + ".bias", {hidden}, role, Kind::kPlain, expert);
}

void add_gqa_attention(ManifestBuilder& b, const ModelSpec& s, const std::string& p) {
  const int64_t H = s.hidden_size, q_out = s.n_heads * s.head_dim, kv_out = s.n_kv_heads * s.head_dim;
  const auto role = TensorRole::kAttention;
  b.add(p + "q_proj.weight", {q_out, H}, role, Kind::kProjection);
  if (s.qkv_bias) b.add(p + "q_proj.bias", {q_out}, role);
  b.add(p + "k_proj.weight", {kv_out, H}, role, Kind::kProjection);
  if (s.qkv_bias) b.add(p + "k_proj.bias", {kv_out}, role);
  b.add(p + "v_proj.weight", {kv_out, H}, role, Kind::kProjection);
  if (s.qkv_bias) b.add(p + "v_proj.bias", {kv_out}, role);
  b.add(p + "o_proj.weight", {H, q_out}, role, Kind::kProjection);
  if (s.o_bias) b.add(p + "o_proj.bias", {H}, role);
  if (s.qk_norm) {
    b.add(p + "q_norm.weight", {s.head_dim}, TensorRole::kNorm);
    b.add(p + "k_norm.weight", {s.head_dim}, TensorRole::kNorm);
  }
  if (s.attention_sinks) b.add(p + "sinks", {s.n_heads}, role);
}

void add_mla_attention(ManifestBuilder& b, const ModelSpec& s, const std::string& p) {
  const MlaSpec& m = *s.mla;
  const int64_t H = s.hidden_size, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  const auto role = TensorRole::kAttention;
  if (m.q_lora_rank > 0) {
    b.add(p + "q_a_proj.weight", {m.q_lora_rank, H}, role, Kind::kProjection);
    if (s.qkv_bias) b.add(p + "q_a_proj.bias", {m.q_lora_rank}, role);
    b.add(p + "q_a_layernorm.weight", {m.q_lora_rank}, TensorRole::kNorm);
    b.add(p + "q_b_proj.weight", {s.n_heads * qk, m.q_lora_rank}, role, Kind::kProjection);
  } else {
    b.add(p + "q_proj.weight", {s.n_heads * qk, H}, role, Kind::kProjection);
  }
  b.add(p + "kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, H}, role, Kind::kProjection);
  if (s.qkv_bias) b.add(p + "kv_a_proj_with_mqa.bias", {m.kv_lora_rank + m.qk_rope_head_dim}, role);
  b.add(p + "kv_a_layernorm.weight", {m.kv_lora_rank}, TensorRole::kNorm);
  b.add(p + "kv_b_proj.weight", {s.n_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, role,
        Kind::kProjection);
  b.add(p + "o_proj.weight", {H, s.n_heads * m.v_head_dim}, role, Kind::kProjection);
  if (s.o_bias) b.add(p + "o_proj.bias", {H}, role);
}

// The MoE block of one layer, named the way each family's release names it.
void add_moe(ManifestBuilder& b, const ModelSpec& s, const std::string& layer_prefix) {
  const MoeSpec& m = *s.moe;
  const int64_t H = s.hidden_size, I = m.expert_intermediate, E = m.n_experts;
  switch (s.family) {
    case Family::kMixtral: {
      const std::string p = layer_prefix + "block_sparse_moe.";
      b.add(p + "gate.weight", {E, H}, TensorRole::kRouter);
      for (int64_t e = 0; e < E; ++e) {
        add_swiglu(b, fmt::format("{}experts.{}.", p, e), I, H, TensorRole::kRoutedExpert, false, e, "w1",
                   "w3", "w2");
      }
      return;
    }
    case Family::kGptOss: {
      const std::string p = layer_prefix + "mlp.";
      b.add(p + "router.weight", {E, H}, TensorRole::kRouter);
      b.add(p + "router.bias", {E}, TensorRole::kRouter);
      const auto role = TensorRole::kRoutedExpert;
      if (s.weights.format == WeightFormat::kMxfp4) {
        b.add_raw(p + "experts.gate_up_proj_blocks", {E, 2 * I, H / 32, 16}, DType::kU8, role, 2);
        b.add_raw(p + "experts.gate_up_proj_scales", {E, 2 * I, H / 32}, DType::kU8, TensorRole::kQuantScale,
                  0);
        b.add(p + "experts.gate_up_proj_bias", {E, 2 * I}, role);
        b.add_raw(p + "experts.down_proj_blocks", {E, H, I / 32, 16}, DType::kU8, role, 2);
        b.add_raw(p + "experts.down_proj_scales", {E, H, I / 32}, DType::kU8, TensorRole::kQuantScale, 0);
        b.add(p + "experts.down_proj_bias", {E, H}, role);
      } else {
        // Dequantized releases store the transformers parameters (x @ W orientation).
        b.add(p + "experts.gate_up_proj", {E, H, 2 * I}, role);
        b.add(p + "experts.gate_up_proj_bias", {E, 2 * I}, role);
        b.add(p + "experts.down_proj", {E, I, H}, role);
        b.add(p + "experts.down_proj_bias", {E, H}, role);
      }
      return;
    }
    case Family::kLlama4Text: {
      const std::string p = layer_prefix + "feed_forward.";
      b.add(p + "router.weight", {E, H}, TensorRole::kRouter);
      b.add(p + "experts.gate_up_proj", {E, H, 2 * I}, TensorRole::kRoutedExpert);
      b.add(p + "experts.down_proj", {E, I, H}, TensorRole::kRoutedExpert);
      add_swiglu(b, p + "shared_expert.", m.shared_intermediate, H, TensorRole::kSharedExpert, false);
      return;
    }
    default:
      break;
  }
  // Qwen-MoE and DeepSeek-style naming.
  const std::string p = layer_prefix + "mlp.";
  b.add(p + "gate.weight", {E, H}, TensorRole::kRouter);
  if (m.correction_bias) b.add(p + "gate.e_score_correction_bias", {E}, TensorRole::kRouter, Kind::kF32);
  for (int64_t e = 0; e < E; ++e) {
    add_swiglu(b, fmt::format("{}experts.{}.", p, e), I, H, TensorRole::kRoutedExpert, false, e);
  }
  if (m.shared_intermediate > 0) {
    const bool qwen = s.family == Family::kQwen2Moe;
    add_swiglu(b, p + (qwen ? "shared_expert." : "shared_experts."), m.shared_intermediate, H,
               TensorRole::kSharedExpert, false);
    if (m.shared_expert_gate) b.add(p + "shared_expert_gate.weight", {1, H}, TensorRole::kSharedExpert);
  }
}

int64_t estimated_tensor_count(const ModelSpec& s) {
  const bool per_expert = s.family != Family::kGptOss && s.family != Family::kLlama4Text;
  const int64_t experts = s.moe && per_expert ? s.moe->n_experts : 0;
  // Both factors are bounded by the parser (layers <= 2^16, experts <= 2^20): no overflow here.
  return s.n_layers * (2 * 3 * experts + 64) + 8;
}

}  // namespace

Result<TensorManifest> build_tensor_manifest(const ModelSpec& s) {
  if (s.n_layers <= 0 || s.layers.size() != static_cast<size_t>(s.n_layers)) {
    return invalid_argument("tensor manifest: the spec's layer list does not match num_hidden_layers");
  }
  if (s.n_layers > (int64_t{1} << 20) || (s.moe && s.moe->n_experts > (int64_t{1} << 24))) {
    return out_of_range("tensor manifest: too many layers or experts to list");
  }
  const int64_t estimate = estimated_tensor_count(s);
  if (estimate > kMaxTensors) {
    return resource_exhausted(
        fmt::format("tensor manifest: the config implies about {} tensors, more than the "
                    "{} we list; its layer or expert counts are implausible",
                    estimate, kMaxTensors));
  }
  ManifestBuilder b(s);
  const std::string prefix = decoder_prefix(s);
  const int64_t H = s.hidden_size;
  b.add(prefix + "embed_tokens.weight", {s.vocab_size, H}, TensorRole::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& layer = s.layers[static_cast<size_t>(n)];
    const std::string lp = fmt::format("{}layers.{}.", prefix, n);
    b.set_layer(n);
    b.add(lp + "input_layernorm.weight", {H}, TensorRole::kNorm);
    if (s.attention == AttentionKind::kMla) {
      add_mla_attention(b, s, lp + "self_attn.");
    } else {
      add_gqa_attention(b, s, lp + "self_attn.");
    }
    b.add(lp + "post_attention_layernorm.weight", {H}, TensorRole::kNorm);
    if (layer.moe) {
      add_moe(b, s, lp);
    } else {
      const char* mlp = s.family == Family::kLlama4Text ? "feed_forward." : "mlp.";
      add_swiglu(b, lp + mlp, layer.dense_intermediate, H, TensorRole::kDenseMlp, s.mlp_bias);
    }
  }
  b.set_layer(-1);
  b.add(prefix + "norm.weight", {H}, TensorRole::kNorm);
  if (!s.tie_word_embeddings) {
    b.add(s.multimodal_wrapper ? "language_model.lm_head.weight" : "lm_head.weight", {s.vocab_size, H},
          TensorRole::kLmHead);
  }
  D0_RETURN_IF_ERROR(b.status());
  return b.take();
}

}  // namespace day0
