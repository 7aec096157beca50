#include "day0/model/weight_blocks.h"

namespace day0::weights {

namespace {
constexpr auto kPlain = WeightStorage::kPlain;
constexpr auto kProj = WeightStorage::kProjection;
constexpr auto kKeptF32 = WeightStorage::kKeptF32;
}  // namespace

void decoder_layer(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& layer, const LayerFfn& ffn) {
  const int64_t H = s.hidden_size;
  b.add("input_layernorm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kInputNorm);
  if (s.attention == AttentionKind::kMla) {
    mla_attention(s, b);
  } else {
    gqa_attention(s, b, &layer);
  }
  b.add("post_attention_layernorm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated,
        WeightSlot::kPostNorm);
  ffn(b, layer);
}

void decoder(const ModelSpec& s, WeightTableBuilder& b, const LayerFfn& ffn) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  b.add("embed_tokens.weight", {V, H}, kPlain, TensorRole::kEmbedding, kVocab, WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    b.begin_layer(n);
    decoder_layer(s, b, s.layers[static_cast<size_t>(n)], ffn);
    b.end_layer();
  }
  b.add("norm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute(s.multimodal_wrapper ? "language_model.lm_head.weight" : "lm_head.weight", {V, H}, kPlain,
                   TensorRole::kLmHead, kVocab, WeightSlot::kLmHead);
  }
}

void gqa_attention(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec* layer) {
  const LayerSpec model_wide;
  const LayerSpec& l = layer != nullptr ? *layer : model_wide;
  const int64_t nh = layer_heads(s, l), nkv = layer_kv_heads(s, l);
  const int64_t d = layer_head_dim(s, l), dv = layer_value_head_dim(s, l);
  const int64_t H = s.hidden_size, q_out = nh * d, kv_out = nkv * d;
  const int64_t v_out = nkv * dv, o_in = nh * dv;
  // With an output gate (attention_output_gate) q_proj gives [query | gate] per head: twice the rows.
  const int64_t q_rows = s.attention_output_gate ? 2 * q_out : q_out;
  // A layer reading another layer's KV (kv_source) has no key / value projections, one whose values are its
  // keys (values_from_keys) no v_proj.
  const bool own_kv = l.kv_source < 0, own_v = own_kv && !l.values_from_keys;
  const auto role = TensorRole::kAttention;
  b.add("self_attn.q_proj.weight", {q_rows, H}, kProj, role, kColumn, WeightSlot::kQ);
  if (s.qkv_bias) b.add("self_attn.q_proj.bias", {q_rows}, kPlain, role, kColumn, WeightSlot::kQBias);
  if (own_kv) b.add("self_attn.k_proj.weight", {kv_out, H}, kProj, role, kColumnKv, WeightSlot::kK);
  if (own_kv && s.qkv_bias)
    b.add("self_attn.k_proj.bias", {kv_out}, kPlain, role, kColumnKv, WeightSlot::kKBias);
  if (own_v) b.add("self_attn.v_proj.weight", {v_out, H}, kProj, role, kColumnKv, WeightSlot::kV);
  if (own_v && s.qkv_bias)
    b.add("self_attn.v_proj.bias", {v_out}, kPlain, role, kColumnKv, WeightSlot::kVBias);
  b.add("self_attn.o_proj.weight", {H, o_in}, kProj, role, kRow, WeightSlot::kO);
  // The bias is added once, after the all-reduce of the row-parallel projection.
  if (s.o_bias) b.add("self_attn.o_proj.bias", {H}, kPlain, role, kReplicated, WeightSlot::kOBias);
  if (s.qk_norm && s.qk_norm_full_width) {
    // One norm over all heads: split with the heads, so TP all-reduces the sum of squares.
    b.add("self_attn.q_norm.weight", {q_out}, kKeptF32, TensorRole::kNorm, kColumn, WeightSlot::kQNorm);
    if (own_kv)
      b.add("self_attn.k_norm.weight", {kv_out}, kKeptF32, TensorRole::kNorm, kColumnKv, WeightSlot::kKNorm);
  } else if (s.qk_norm) {
    b.add("self_attn.q_norm.weight", {d}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kQNorm);
    if (own_kv)
      b.add("self_attn.k_norm.weight", {d}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kKNorm);
  }
  if (s.attention_sinks && l.sinks)
    b.add("self_attn.sinks", {nh}, kKeptF32, role, kColumn, WeightSlot::kSinks);
}

void mla_attention(const ModelSpec& s, WeightTableBuilder& b, const std::string& p) {
  const MlaSpec& m = *s.mla;
  const int64_t H = s.hidden_size, qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  const int64_t kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
  const auto role = TensorRole::kAttention;
  if (m.q_lora_rank > 0) {
    b.add(p + "q_a_proj.weight", {m.q_lora_rank, H}, kProj, role, kReplicated, WeightSlot::kQA);
    if (s.qkv_bias) {
      b.add(p + "q_a_proj.bias", {m.q_lora_rank}, kPlain, role, kReplicated, WeightSlot::kQABias);
    }
    b.add(p + "q_a_layernorm.weight", {m.q_lora_rank}, kKeptF32, TensorRole::kNorm, kReplicated,
          WeightSlot::kQANorm);
    b.add(p + "q_b_proj.weight", {s.n_heads * qk, m.q_lora_rank}, kProj, role, kColumn, WeightSlot::kQB);
  } else {
    b.add(p + "q_proj.weight", {s.n_heads * qk, H}, kProj, role, kColumn, WeightSlot::kQ);
  }
  b.add(p + "kv_a_proj_with_mqa.weight", {kv_a, H}, kProj, role, kReplicated, WeightSlot::kKvA);
  if (s.qkv_bias)
    b.add(p + "kv_a_proj_with_mqa.bias", {kv_a}, kPlain, role, kReplicated, WeightSlot::kKvABias);
  b.add(p + "kv_a_layernorm.weight", {m.kv_lora_rank}, kKeptF32, TensorRole::kNorm, kReplicated,
        WeightSlot::kKvANorm);
  b.add(p + "kv_b_proj.weight", {s.n_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, kProj,
        role, kColumn, WeightSlot::kKvB);
  b.add(p + "o_proj.weight", {H, s.n_heads * m.v_head_dim}, kProj, role, kRow, WeightSlot::kO);
  if (s.o_bias) b.add(p + "o_proj.bias", {H}, kPlain, role, kReplicated, WeightSlot::kOBias);
}

void dense_mlp(const ModelSpec& s, WeightTableBuilder& b, const std::string& p, int64_t width, bool bias,
               SwigluNames n) {
  const int64_t H = s.hidden_size;
  const auto role = TensorRole::kDenseMlp;
  b.add(p + n.gate + ".weight", {width, H}, kProj, role, kColumn, WeightSlot::kMlpGate);
  if (bias) b.add(p + n.gate + ".bias", {width}, kPlain, role, kColumn, WeightSlot::kMlpGateBias);
  b.add(p + n.up + ".weight", {width, H}, kProj, role, kColumn, WeightSlot::kMlpUp);
  if (bias) b.add(p + n.up + ".bias", {width}, kPlain, role, kColumn, WeightSlot::kMlpUpBias);
  b.add(p + n.down + ".weight", {H, width}, kProj, role, kRow, WeightSlot::kMlpDown);
  if (bias) b.add(p + n.down + ".bias", {H}, kPlain, role, kReplicated, WeightSlot::kMlpDownBias);
}

void shared_expert(const ModelSpec& s, WeightTableBuilder& b, const std::string& p, int64_t width,
                   SwigluNames n) {
  const int64_t H = s.hidden_size;
  const auto role = TensorRole::kSharedExpert;
  b.add(p + n.gate + ".weight", {width, H}, kProj, role, kColumn, WeightSlot::kSharedGate);
  b.add(p + n.up + ".weight", {width, H}, kProj, role, kColumn, WeightSlot::kSharedUp);
  b.add(p + n.down + ".weight", {H, width}, kProj, role, kRow, WeightSlot::kSharedDown);
}

void router(const ModelSpec& s, WeightTableBuilder& b, const std::string& name, bool bias) {
  const int64_t E = s.moe->n_experts;
  b.add(name, {E, s.hidden_size}, kKeptF32, TensorRole::kRouter, kReplicated, WeightSlot::kRouter);
  if (bias) {
    const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
    b.add(stem + ".bias", {E}, kKeptF32, TensorRole::kRouter, kReplicated, WeightSlot::kRouterBias);
  }
}

void separate_experts(const ModelSpec& s, WeightTableBuilder& b, const std::string& p, SwigluNames n) {
  const int64_t H = s.hidden_size, I = s.moe->expert_intermediate;
  const auto role = TensorRole::kRoutedExpert;
  // Expert-major order, as releases store them.
  for (int64_t e = 0; e < s.moe->n_experts; ++e) {
    b.add(p + n.gate + ".weight", {I, H}, kProj, role, kOneExpert, WeightSlot::kExpertGate, e);
    b.add(p + n.up + ".weight", {I, H}, kProj, role, kOneExpert, WeightSlot::kExpertUp, e);
    b.add(p + n.down + ".weight", {H, I}, kProj, role, kOneExpert, WeightSlot::kExpertDown, e);
  }
}

void deepseek_moe(const ModelSpec& s, WeightTableBuilder& b) {
  const MoeSpec& m = *s.moe;
  router(s, b, "mlp.gate.weight");
  if (m.correction_bias) {
    b.add("mlp.gate.e_score_correction_bias", {m.n_experts}, WeightStorage::kF32, TensorRole::kRouter,
          kReplicated, WeightSlot::kCorrectionBias);
  }
  separate_experts(s, b, "mlp.experts.{E}.");
  if (m.shared_intermediate > 0) shared_expert(s, b, "mlp.shared_experts.", m.shared_intermediate);
}

void deepseek_mtp_layers(const ModelSpec& s, WeightTableBuilder& b, const LayerFfn& ffn) {
  if (s.layers.empty()) return;
  const int64_t H = s.hidden_size, V = s.vocab_size;
  for (int64_t k = 0; k < s.n_mtp_layers; ++k) {
    b.begin_layer(s.n_layers + k);
    b.add("embed_tokens.weight", {V, H}, kPlain, TensorRole::kEmbedding, kVocab, WeightSlot::kEmbedding);
    b.add("enorm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kMtpEmbeddingNorm);
    b.add("hnorm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kMtpHiddenNorm);
    b.add("eh_proj.weight", {H, 2 * H}, kProj, TensorRole::kAttention, kReplicated,
          WeightSlot::kMtpProjection);
    b.add("shared_head.norm.weight", {H}, kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kFinalNorm);
    b.add("shared_head.head.weight", {V, H}, kPlain, TensorRole::kLmHead, kVocab, WeightSlot::kLmHead);
    decoder_layer(s, b, s.layers.back(), ffn);
    b.end_layer();
  }
}

void moe_beside_dense_mlp(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t E = s.moe->n_experts, H = s.hidden_size, I = s.moe->expert_intermediate;
  router(s, b, "router.proj.weight");
  b.add("router.scale", {H}, kKeptF32, TensorRole::kRouter, kReplicated, WeightSlot::kRouterInputScale);
  b.add("router.per_expert_scale", {E}, kKeptF32, TensorRole::kRouter, kReplicated,
        WeightSlot::kRouterExpertScale);
  b.add("experts.gate_up_proj", {E, 2 * I, H}, kPlain, TensorRole::kRoutedExpert, kStackedExperts,
        WeightSlot::kExpertsGateUpRows);
  b.add("experts.down_proj", {E, H, I}, kPlain, TensorRole::kRoutedExpert, kStackedExperts,
        WeightSlot::kExpertsDownRows);
  const std::pair<const char*, WeightSlot> norms[] = {
      {"pre_feedforward_layernorm_2.weight", WeightSlot::kMoeInNorm},
      {"post_feedforward_layernorm_1.weight", WeightSlot::kDenseOutNorm},
      {"post_feedforward_layernorm_2.weight", WeightSlot::kMoeOutNorm}};
  for (const auto& [name, slot] : norms) b.add(name, {H}, kKeptF32, TensorRole::kNorm, kReplicated, slot);
}

void hyper_connection(const ModelSpec& s, WeightTableBuilder& b, const std::string& fn,
                      const std::string& base, const std::string& scale, HyperConnectionSlots slots,
                      bool head) {
  const HyperConnectionSpec& hc = *s.hyper_connections;
  const int64_t outputs = head ? hc.streams : hc.mix_width();
  const auto role = TensorRole::kHyperConnection;
  b.add(fn, {outputs, hc.streams * s.hidden_size}, WeightStorage::kF32, role, kReplicated, slots.fn);
  b.add(base, {outputs}, WeightStorage::kF32, role, kReplicated, slots.base);
  b.add(scale, {head ? 1 : 3}, WeightStorage::kF32, role, kReplicated, slots.scale);
}

// `indexer`: the lightning indexer's own compressor (its slots), else the layer's.
void kv_compressor(const ModelSpec& s, WeightTableBuilder& b, const std::string& p, int64_t ratio,
                   int64_t head_dim, bool overlapping, bool indexer) {
  const int64_t width = overlapping ? 2 * head_dim : head_dim;  // [series a | series b] when overlapping
  const auto role = TensorRole::kAttention;
  b.add(p + "ape", {ratio, width}, WeightStorage::kF32, role, kReplicated,
        indexer ? WeightSlot::kIndexCompressorBias : WeightSlot::kCompressorBias);
  // Releases keep the compressor's projections unquantized (BF16 beside FP8 projections).
  b.add(p + "wkv.weight", {width, s.hidden_size}, WeightStorage::kPlain, role, kReplicated,
        indexer ? WeightSlot::kIndexCompressorKv : WeightSlot::kCompressorKv);
  b.add(p + "wgate.weight", {width, s.hidden_size}, WeightStorage::kPlain, role, kReplicated,
        indexer ? WeightSlot::kIndexCompressorGate : WeightSlot::kCompressorGate);
  b.add(p + "norm.weight", {head_dim}, kKeptF32, TensorRole::kNorm, kReplicated,
        indexer ? WeightSlot::kIndexCompressorNorm : WeightSlot::kCompressorNorm);
}

void shared_kv_low_rank_attention(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& l) {
  const int64_t H = s.hidden_size, D = s.head_dim, heads = s.n_heads;
  const SharedKvLowRankAttentionSpec& a = *s.shared_kv_low_rank;
  const CompressedKvSpec& c = *s.compressed_kv;
  const auto attn = TensorRole::kAttention, norm = TensorRole::kNorm;
  b.add("attn.attn_sink", {heads}, WeightStorage::kF32, attn, kColumn, WeightSlot::kSinks);
  b.add("attn.wq_a.weight", {a.q_lora_rank, H}, WeightStorage::kProjection, attn, kReplicated,
        WeightSlot::kQA);
  b.add("attn.q_norm.weight", {a.q_lora_rank}, WeightStorage::kKeptF32, norm, kReplicated,
        WeightSlot::kQANorm);
  b.add("attn.wq_b.weight", {heads * D, a.q_lora_rank}, WeightStorage::kProjection, attn, kColumn,
        WeightSlot::kQB);
  // The one key = value head is replicated under TP; the output groups split with the heads.
  b.add("attn.wkv.weight", {D, H}, WeightStorage::kProjection, attn, kReplicated, WeightSlot::kSharedKv);
  b.add("attn.norm.weight", {D}, WeightStorage::kKeptF32, norm, kReplicated, WeightSlot::kSharedKvNorm);
  b.add("attn.wo_a.weight", {a.out_groups * a.out_rank, heads * D / a.out_groups}, WeightStorage::kProjection,
        attn, kColumn, WeightSlot::kOutGroupsA);
  b.add("attn.wo_b.weight", {H, a.out_groups * a.out_rank}, WeightStorage::kProjection, attn, kRow,
        WeightSlot::kOutGroupsB);
  if (l.kv_compress_ratio > 0) {
    kv_compressor(s, b, "attn.compressor.", l.kv_compress_ratio, D, l.compressed_sparse, false);
  }
  if (l.compressed_sparse) {
    kv_compressor(s, b, "attn.indexer.compressor.", l.kv_compress_ratio, c.index_head_dim, true, true);
    b.add("attn.indexer.wq_b.weight", {c.index_n_heads * c.index_head_dim, a.q_lora_rank},
          WeightStorage::kProjection, attn, kReplicated, WeightSlot::kIndexerQ);
    b.add("attn.indexer.weights_proj.weight", {c.index_n_heads, H}, WeightStorage::kPlain, attn, kReplicated,
          WeightSlot::kIndexerWeights);
  }
}

}  // namespace day0::weights
