#include "day0/model/attention_cost.h"

#include <algorithm>

namespace day0 {
namespace {

// The tighter of two caps, 0 meaning none.
int64_t tighter(int64_t a, int64_t b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

// sum over v = 1 .. n of min(v, cap) (cap 0: v).
double sum_capped(int64_t n, int64_t cap) {
  const auto t = static_cast<double>(n);
  if (cap <= 0 || n <= cap) return t * (t + 1) / 2;
  const auto c = static_cast<double>(cap);
  return c * (c + 1) / 2 + (t - c) * c;
}

// sum over v = 1 .. n of floor(v / m): q full runs of m values 0 .. q - 1, then r + 1 values of q.
double sum_windows(int64_t n, int64_t m) {
  if (n <= 0) return 0;
  const auto q = static_cast<double>(n / m), r = static_cast<double>(n % m);
  return static_cast<double>(m) * q * (q - 1) / 2 + q * (r + 1);
}

// sum over v = 1 .. n of min(floor(v / m), cap) (cap 0: none): from v = cap * m on, every row holds cap.
double sum_windows_capped(int64_t n, int64_t m, int64_t cap) {
  if (cap <= 0 || n < cap * m) return sum_windows(n, m);
  const int64_t below = cap * m - 1;
  return sum_windows(below, m) + static_cast<double>(cap) * static_cast<double>(n - below);
}

}  // namespace

RowKeys row_keys(const KeyReach& reach, int64_t visible) {
  RowKeys keys;
  const int64_t raw = reach.window > 0 ? std::min(visible, reach.window) : visible;
  if (reach.entry_ratio > 0) {
    const int64_t entries = visible / reach.entry_ratio;
    keys.entries = static_cast<double>(reach.selected > 0 ? std::min(entries, reach.selected) : entries);
    keys.attended = static_cast<double>(raw) + keys.entries;
    if (reach.indexed) keys.indexed = static_cast<double>(entries);
  } else {
    keys.attended = static_cast<double>(reach.selected > 0 ? std::min(raw, reach.selected) : raw);
    if (reach.indexed) keys.indexed = static_cast<double>(raw);
  }
  return keys;
}

RowKeys prompt_keys(const KeyReach& reach, int64_t tokens) {
  RowKeys keys;
  if (tokens <= 0) return keys;
  if (reach.entry_ratio > 0) {
    keys.entries = sum_windows_capped(tokens, reach.entry_ratio, reach.selected);
    keys.attended = sum_capped(tokens, reach.window) + keys.entries;
    if (reach.indexed) keys.indexed = sum_windows(tokens, reach.entry_ratio);
  } else {
    keys.attended = sum_capped(tokens, tighter(reach.window, reach.selected));
    if (reach.indexed) keys.indexed = sum_capped(tokens, reach.window);
  }
  return keys;
}

double lightning_index_flops_per_pair(int64_t n_heads, int64_t head_dim) {
  return static_cast<double>(n_heads) * static_cast<double>(2 * head_dim + 3);
}

double block_index_flops_per_pair(int64_t n_heads, int64_t head_dim) {
  return static_cast<double>(n_heads) * static_cast<double>(2 * head_dim + 1);
}

bool layer_attends(const LayerSpec& layer) {
  return layer_has_kv(layer) || layer.kv_source >= 0;
}

KeyReach key_reach(const ModelSpec& spec, const LayerSpec& layer) {
  KeyReach reach;
  if (!layer_attends(layer)) return reach;
  if (layer.mask != AttentionMask::kCausal && layer.window > 0) reach.window = layer.window;
  if (layer.kv_compress_ratio > 0) {
    reach.entry_ratio = layer.kv_compress_ratio;
    if (layer.compressed_sparse && spec.compressed_kv) {
      reach.selected = spec.compressed_kv->index_topk;
      reach.indexed = true;
    }
  } else if (layer.block_sparse && spec.block_indexer) {
    reach.selected = spec.block_indexer->topk_blocks * spec.block_indexer->block_size;
    reach.indexed = true;
  } else if (spec.attention == AttentionKind::kMla && spec.indexer) {
    reach.selected = spec.indexer->topk;
    reach.indexed = !layer.shared_key_selection;
  }
  return reach;
}

AttentionPairCost attention_pair_cost(const ModelSpec& spec, const LayerSpec& layer) {
  AttentionPairCost cost;
  if (!layer_attends(layer)) return cost;
  cost.reach = key_reach(spec, layer);
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
  if (cost.reach.indexed) {
    if (cost.reach.entry_ratio > 0) {
      const CompressedKvSpec& ix = *spec.compressed_kv;
      cost.index_flops = lightning_index_flops_per_pair(ix.index_n_heads, ix.index_head_dim);
    } else if (layer.block_sparse) {
      const BlockIndexerSpec& ix = *spec.block_indexer;
      cost.index_flops = block_index_flops_per_pair(ix.n_heads, ix.head_dim);
    } else {
      const IndexerSpec& ix = *spec.indexer;
      cost.index_flops = lightning_index_flops_per_pair(ix.n_heads, ix.head_dim);
    }
  }
  return cost;
}

}  // namespace day0
