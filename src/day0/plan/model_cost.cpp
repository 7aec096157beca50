#include "day0/plan/model_cost.h"

#include <algorithm>

#include "day0/model/model_memory.h"

namespace day0::plan {

const char* weight_group_name(WeightGroup g) {
  switch (g) {
    case WeightGroup::kAttentionSharded:
      return "attention (sharded)";
    case WeightGroup::kAttentionReplicated:
      return "attention (replicated)";
    case WeightGroup::kAttentionKv:
      return "attention k/v";
    case WeightGroup::kDenseMlp:
      return "dense MLP";
    case WeightGroup::kSharedExperts:
      return "shared experts";
    case WeightGroup::kRoutedExperts:
      return "routed experts";
    case WeightGroup::kRouter:
      return "router";
    case WeightGroup::kNorm:
      return "norms";
  }
  return "?";
}

bool weight_group_quantizable(WeightGroup g) {
  return g != WeightGroup::kRouter && g != WeightGroup::kNorm;
}

double bytes_per_param(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kCheckpoint:
      return 0;
    case WeightPrecision::kBF16:
      return 2.0;
    case WeightPrecision::kFP8:
      return 1.0 + 4.0 / (128.0 * 128.0);
    case WeightPrecision::kINT8:
      return 1.0;
    case WeightPrecision::kINT4:
      return 0.5 + 2.0 / 128.0;
  }
  return 2.0;
}

double group_bytes(const LayerCost& layer, WeightGroup g, WeightPrecision precision) {
  if (precision == WeightPrecision::kCheckpoint) return layer.stored(g);
  if (!weight_group_quantizable(g)) return layer.param(g) * 2.0;
  return layer.param(g) * bytes_per_param(precision);
}

std::array<WeightTableRow, 5> weight_table(double params) {
  return {
      {{"FP32", params * 4}, {"BF16", params * 2}, {"FP8", params}, {"INT8", params}, {"INT4", params / 2}}};
}

double ModelCost::total_params() const {
  double total = embedding_params + lm_head_params + final_norm_params;
  for (const auto& layer : layers) {
    for (double p : layer.params) total += p;
  }
  return total;
}

double ModelCost::active_params_per_token() const {
  double total = embedding_params + lm_head_params + final_norm_params;
  for (const auto& layer : layers) {
    for (int g = 0; g < kWeightGroups; ++g) {
      if (g == static_cast<int>(WeightGroup::kRoutedExperts)) {
        if (n_experts > 0) total += layer.params[g] * static_cast<double>(experts_per_token) / n_experts;
      } else {
        total += layer.params[g];
      }
    }
  }
  return total;
}

void set_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, bool linear_attention) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    const auto i = static_cast<size_t>(dtype);
    layer.kv_bytes_per_token[i] =
        linear_attention ? 0.0 : static_cast<double>(kv_bytes_per_token_per_layer(spec, dtype));
  }
  layer.state_bytes_per_sequence =
      linear_attention ? static_cast<double>(recurrent_state_bytes_per_layer(spec, KvDtype::kBF16)) : 0.0;
}

void set_compressed_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, const LayerSpec& layer_spec) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    layer.compressed_kv_bytes_per_token[static_cast<size_t>(dtype)] =
        compressed_kv_bytes_per_token(spec, layer_spec, dtype);
  }
}

double ModelCost::kv_bytes_per_token(KvPrecision kv) const {
  double total = 0;
  for (const auto& layer : layers) total += layer.kv_bytes(kv) + layer.compressed_kv_bytes(kv);
  return total;
}

double ModelCost::state_bytes_per_sequence() const {
  double total = 0;
  for (const auto& layer : layers) total += layer.state_bytes_per_sequence;
  return total;
}

ModelCost model_cost_from_shape(const ModelShape& s) {
  ModelCost m;
  m.name = s.name;
  m.mla = s.mla;
  m.hidden = s.hidden;
  m.vocab = s.vocab;
  m.n_heads = s.n_heads;
  m.n_kv_heads = s.mla ? 1 : s.n_kv_heads;
  m.qk_head_dim = s.mla ? s.qk_nope_head_dim + s.qk_rope_head_dim : s.head_dim;
  m.v_head_dim = s.mla ? s.v_head_dim : s.head_dim;
  m.n_experts = s.n_experts;
  m.experts_per_token = s.experts_per_token;
  m.expert_intermediate = s.expert_intermediate;
  m.dense_intermediate = s.dense_intermediate;
  m.shared_intermediate = s.n_shared_experts * s.expert_intermediate;
  m.tied_embeddings = s.tied_embeddings;
  const double h = static_cast<double>(s.hidden);
  m.embedding_params = static_cast<double>(s.vocab) * h;
  m.lm_head_params = s.tied_embeddings ? 0 : m.embedding_params;
  m.final_norm_params = h;
  const double heads = static_cast<double>(s.n_heads);
  ModelSpec attention;  // the attention sizes the KV figure reads
  attention.attention = s.mla ? AttentionKind::kMla : AttentionKind::kGqa;
  attention.n_kv_heads = s.n_kv_heads;
  attention.head_dim = s.head_dim;
  if (s.mla) attention.mla = MlaSpec{.kv_lora_rank = s.kv_lora_rank, .qk_rope_head_dim = s.qk_rope_head_dim};
  for (int64_t i = 0; i < s.n_layers; ++i) {
    LayerCost l;
    set_kv_bytes_per_token(l, attention);
    l.param(WeightGroup::kNorm) = 2 * h;
    if (s.mla) {
      const double qk = static_cast<double>(s.qk_nope_head_dim + s.qk_rope_head_dim);
      const double latent = static_cast<double>(s.kv_lora_rank);
      const double rope = static_cast<double>(s.qk_rope_head_dim);
      const double v = static_cast<double>(s.v_head_dim);
      double replicated = h * (latent + rope) + latent;  // kv_a_proj_with_mqa + kv_a_layernorm
      double sharded = latent * heads * (static_cast<double>(s.qk_nope_head_dim) + v) + heads * v * h;
      if (s.q_lora_rank > 0) {
        const double q_rank = static_cast<double>(s.q_lora_rank);
        replicated += h * q_rank + q_rank;  // q_a_proj + q_a_layernorm
        sharded += q_rank * heads * qk;     // q_b_proj
      } else {
        sharded += h * heads * qk;  // q_proj
      }
      l.param(WeightGroup::kAttentionReplicated) = replicated;
      l.param(WeightGroup::kAttentionSharded) = sharded;
      // Absorbed decode: scores over latent + rope key, output over the latent.
      l.attn_flops_per_pair_decode = heads * (2 * (latent + rope) + 2 * latent);
      l.attn_flops_per_pair_prefill = heads * (2 * qk + 2 * v);
    } else {
      const double hd = static_cast<double>(s.head_dim);
      const double kv_heads = static_cast<double>(s.n_kv_heads);
      l.param(WeightGroup::kAttentionSharded) = 2 * h * heads * hd;
      l.param(WeightGroup::kAttentionKv) = 2 * h * kv_heads * hd;
      l.attn_flops_per_pair_decode = heads * 4 * hd;
      l.attn_flops_per_pair_prefill = heads * 4 * hd;
    }
    l.moe = s.n_experts > 0 && i >= s.n_dense_layers;
    if (l.moe) {
      const double e = static_cast<double>(s.expert_intermediate);
      l.param(WeightGroup::kRoutedExperts) = static_cast<double>(s.n_experts) * 3 * h * e;
      l.param(WeightGroup::kSharedExperts) = static_cast<double>(s.n_shared_experts) * 3 * h * e;
      l.param(WeightGroup::kRouter) = static_cast<double>(s.n_experts) * h;
    } else {
      l.param(WeightGroup::kDenseMlp) = 3 * h * static_cast<double>(s.dense_intermediate);
    }
    for (int g = 0; g < kWeightGroups; ++g) l.checkpoint_bytes[g] = l.params[g] * 2;
    m.layers.push_back(l);
  }
  m.embedding_checkpoint_bytes = m.embedding_params * 2;
  m.lm_head_checkpoint_bytes = m.lm_head_params * 2;
  if (s.n_experts == 0 || s.n_dense_layers == 0)
    m.dense_intermediate = s.n_experts == 0 ? s.dense_intermediate : 0;
  return m;
}

}  // namespace day0::plan
