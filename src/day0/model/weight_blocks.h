#pragma once
// Shared pieces of family weight tables (weight_table.h): the decoder skeleton, attention kinds, the
// dense SwiGLU, routers and experts in the layouts releases use. A family's table combines them.
#include <functional>
#include <string>

#include "day0/model/model_spec.h"
#include "day0/model/weight_table.h"

namespace day0::weights {

inline constexpr ShardSpec kReplicated{ShardRule::kReplicated, -1};
inline constexpr ShardSpec kColumn{ShardRule::kColumn, 0};
inline constexpr ShardSpec kColumnKv{ShardRule::kColumnKv, 0};
inline constexpr ShardSpec kRow{ShardRule::kRow, 1};
inline constexpr ShardSpec kVocab{ShardRule::kVocab, 0};
inline constexpr ShardSpec kOneExpert{ShardRule::kExpert, -1};
inline constexpr ShardSpec kStackedExperts{ShardRule::kExpert, 0};

// The FFN of decoder layer `layer` (scope: "model.layers.{L}.").
using LayerFfn = std::function<void(WeightTableBuilder& b, const LayerSpec& layer)>;

// embed_tokens, then every layer (input_layernorm, attention, post_attention_layernorm, `ffn`), then
// norm and lm_head (absent when tied); `mlp_prefix` names nothing: the FFN callback adds its own.
void decoder(const ModelSpec& s, WeightTableBuilder& b, const LayerFfn& ffn);
// One pre-norm decoder layer's norms and attention (GQA or MLA from the spec) followed by `ffn`.
void decoder_layer(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& layer, const LayerFfn& ffn);

// self_attn.{q,k,v,o}_proj (+ biases per spec.qkv_bias / o_bias), q_norm / k_norm, sinks, sized for
// `layer`'s heads (LayerSpec overrides) or, without one, the model's.
void gqa_attention(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec* layer = nullptr);
// self_attn.{q_a_proj, q_a_layernorm, q_b_proj | q_proj}, kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj, o_proj, under `prefix` (layer pairs' sublayers: "self_attn.0.").
void mla_attention(const ModelSpec& s, WeightTableBuilder& b, const std::string& prefix = "self_attn.");

struct SwigluNames {
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};
// A dense SwiGLU under `prefix` ("mlp.") of `width`, sharded column (gate, up) / row (down).
void dense_mlp(const ModelSpec& s, WeightTableBuilder& b, const std::string& prefix, int64_t width, bool bias,
               SwigluNames names = {});
// The shared expert(s) as one SwiGLU of `width` under `prefix`.
void shared_expert(const ModelSpec& s, WeightTableBuilder& b, const std::string& prefix, int64_t width,
                   SwigluNames names = {});
// Router [E, H] (float32 in many releases); `bias` adds `<name minus .weight>.bias`.
void router(const ModelSpec& s, WeightTableBuilder& b, const std::string& name, bool bias = false);
// Routed experts stored one tensor per expert under `prefix` ("mlp.experts.{E}.").
void separate_experts(const ModelSpec& s, WeightTableBuilder& b, const std::string& prefix,
                      SwigluNames names = {});

// The MoE block several families share, under mlp.: gate (+ e_score_correction_bias), experts,
// shared_experts of spec.moe->shared_intermediate.
void deepseek_moe(const ModelSpec& s, WeightTableBuilder& b);
// A MoE beside the layer's dense MLP (spec.dense_mlp_beside_moe; Gemma 4's names): router.proj, router.scale
// [H], router.per_expert_scale [E], experts.gate_up_proj [E, 2I, H] / down_proj [E, H, I] (nn.Linear rows),
// and the norms pre_feedforward_layernorm_2, post_feedforward_layernorm_1 / _2 [H].
void moe_beside_dense_mlp(const ModelSpec& s, WeightTableBuilder& b);
// Multi-token-prediction layers (spec.n_mtp_layers, after the last decoder layer): a
// decoder layer like the last one plus embed_tokens, enorm, hnorm, eh_proj and shared_head.
void deepseek_mtp_layers(const ModelSpec& s, WeightTableBuilder& b, const LayerFfn& ffn);

// Hyper-connections (spec.hyper_connections, float32, replicated): the stream-mixing projection `fn`
// [(2 + n) * n, n * H] of n streams with its `base` [(2 + n) * n] and `scale` [3] (pre, post, comb); a `head`
// (the final collapse) has fn [n, n * H], base [n], scale [1]. `slots` says where the engine binds them.
struct HyperConnectionSlots {
  WeightSlot fn = WeightSlot::kNone, base = WeightSlot::kNone, scale = WeightSlot::kNone;
};
inline constexpr HyperConnectionSlots kHcAttnSlots{WeightSlot::kHcAttnFn, WeightSlot::kHcAttnBase,
                                                   WeightSlot::kHcAttnScale};
inline constexpr HyperConnectionSlots kHcFfnSlots{WeightSlot::kHcFfnFn, WeightSlot::kHcFfnBase,
                                                  WeightSlot::kHcFfnScale};
inline constexpr HyperConnectionSlots kHcHeadSlots{WeightSlot::kHcHeadFn, WeightSlot::kHcHeadBase,
                                                   WeightSlot::kHcHeadScale};
void hyper_connection(const ModelSpec& s, WeightTableBuilder& b, const std::string& fn,
                      const std::string& base, const std::string& scale, HyperConnectionSlots slots,
                      bool head = false);
// A KV compressor under `prefix` pooling `ratio` tokens into entries of `head_dim`: its position bias `ape`
// [ratio, w] (float32), `wkv` and `wgate` [w, H] (unquantized in releases), and the entries' RMSNorm
// `norm` [head_dim]; w = 2 * head_dim for overlapping windows (two series), else head_dim. Replicated.
// `indexer`: the lightning indexer's compressor (bound to its own slots).
void kv_compressor(const ModelSpec& s, WeightTableBuilder& b, const std::string& prefix, int64_t ratio,
                   int64_t head_dim, bool overlapping, bool indexer);

// Low-rank queries over one shared key = value head (spec.shared_kv_low_rank) in the DeepSeek release's
// names under attn.: attn_sink [heads], wq_a [q_lora, H], q_norm, wq_b [heads * D, q_lora] (heads split),
// wkv [D, H] and its norm (replicated), the grouped output projection wo_a [groups * rank, heads * D /
// groups] (split with the heads) and wo_b [H, groups * rank] (row split); on a compressed layer its KV
// compressor, and on a sparse one the lightning indexer's compressor, wq_b and weights_proj.
void shared_kv_low_rank_attention(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& layer);

}  // namespace day0::weights
