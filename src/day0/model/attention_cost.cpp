#include "day0/model/attention_cost.h"

namespace day0 {

bool layer_attends(const LayerSpec& layer) {
  return layer_has_kv(layer) || layer.kv_source >= 0;
}

AttentionPairCost attention_pair_cost(const ModelSpec& spec, const LayerSpec& layer) {
  AttentionPairCost cost;
  if (!layer_attends(layer)) return cost;
  if (spec.attention == AttentionKind::kMla && spec.mla.has_value()) {
    const MlaSpec& mla = *spec.mla;
    const auto heads = static_cast<double>(spec.n_heads);
    const auto latent = static_cast<double>(mla.kv_lora_rank);
    const auto rope = static_cast<double>(mla.qk_rope_head_dim);
    const auto qk = static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim);
    const auto v = static_cast<double>(mla.v_head_dim);
    cost.decode_flops = heads * (2 * (latent + rope) + 2 * latent);
    cost.prefill_flops = heads * (2 * qk + 2 * v);
  } else {  // GQA, sliding or compressed: the layer's own heads and widths; a shared key = value head too
    const auto width = 2 * static_cast<double>(layer_head_dim(spec, layer)) +
                       2 * static_cast<double>(layer_value_head_dim(spec, layer));
    cost.decode_flops = static_cast<double>(layer_heads(spec, layer)) * width;
    cost.prefill_flops = cost.decode_flops;
  }
  if (layer.block_sparse && spec.block_indexer) {
    const BlockIndexerSpec& ix = *spec.block_indexer;
    cost.attended_keys = ix.topk_blocks * ix.block_size;
    cost.index_flops = 2.0 * static_cast<double>(ix.n_heads * ix.head_dim);
  }
  return cost;
}

}  // namespace day0
