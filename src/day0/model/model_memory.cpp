#include "day0/model/model_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include "day0/core/checked_math.h"
#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"
#include "day0/ops/tensor.h"

namespace day0 {

KvRowWidths kv_row_widths(const ModelSpec& spec) {
  if (spec.shared_kv_low_rank) return {spec.head_dim, 0};  // one head that is both key and value
  if (spec.attention == AttentionKind::kMla && spec.mla) {
    // With a lightning indexer: its key, cached in the same rows (beside k_pe).
    return {spec.mla->kv_lora_rank, spec.mla->qk_rope_head_dim + (spec.indexer ? spec.indexer->head_dim : 0)};
  }
  // Rows as wide as the widest layer's keys and values (the pool's; other layers leave columns unused).
  // Block-sparse attention: the token's index key after V, in every layer's rows (one pool).
  return {max_key_width(spec),
          max_value_width(spec) + (spec.block_indexer ? spec.block_indexer->head_dim : 0)};
}

uint64_t kv_bytes_per_token_per_layer(const ModelSpec& spec, KvDtype dtype) {
  const KvRowWidths w = kv_row_widths(spec);
  return static_cast<uint64_t>(w.first + w.second) * static_cast<uint64_t>(kv_dtype_bytes(dtype));
}

uint64_t compressed_kv_entry_bytes(const ModelSpec& spec, const LayerSpec& layer, KvDtype dtype) {
  if (layer.kv_compress_ratio <= 0 || !spec.compressed_kv) return 0;
  int64_t elements = spec.head_dim;  // the pooled key = value entry
  if (layer.compressed_sparse) elements += spec.compressed_kv->index_head_dim;  // and the indexer's key
  return static_cast<uint64_t>(elements) * static_cast<uint64_t>(kv_dtype_bytes(dtype));
}

double compressed_kv_bytes_per_token(const ModelSpec& spec, const LayerSpec& layer, KvDtype dtype) {
  if (layer.kv_compress_ratio <= 0) return 0.0;
  return static_cast<double>(compressed_kv_entry_bytes(spec, layer, dtype)) /
         static_cast<double>(layer.kv_compress_ratio);
}

uint64_t kv_cache_bytes(const ModelSpec& spec, int64_t tokens, KvDtype dtype) {
  const uint64_t per_layer = kv_bytes_per_token_per_layer(spec, dtype);
  uint64_t total = 0;
  for (const auto& layer : spec.layers) {
    if (!layer_has_kv(layer)) continue;  // a fixed-size state instead (recurrent_state_bytes_*), or none
    int64_t held = tokens;
    if (layer.mask != AttentionMask::kCausal && layer.window > 0) held = std::min(tokens, layer.window);
    total += per_layer * static_cast<uint64_t>(held);
    // Whole compression groups only: the tail of a group not yet full is pooled when it fills.
    if (layer.kv_compress_ratio > 0) {
      total += compressed_kv_entry_bytes(spec, layer, dtype) *
               static_cast<uint64_t>(tokens / layer.kv_compress_ratio);
    }
  }
  return total;
}

std::vector<KvLayerKind> kv_layer_kinds(const ModelSpec& spec, KvDtype dtype) {
  std::vector<KvLayerKind> kinds;
  const auto per_layer = static_cast<double>(kv_bytes_per_token_per_layer(spec, dtype));
  for (const auto& layer : spec.layers) {
    if (!layer_has_kv(layer)) continue;
    KvLayerKind k;
    const bool windowed = layer.mask != AttentionMask::kCausal && layer.window > 0;
    k.window = windowed ? layer.window : 0;
    k.compress_ratio = layer.kv_compress_ratio;
    k.raw_bytes_per_token = per_layer;
    k.compressed_bytes_per_token = compressed_kv_bytes_per_token(spec, layer, dtype);
    if (layer.kv_compress_ratio > 0) {
      k.name = fmt::format("{} (1 entry / {} tokens{}) + window {}",
                           layer.compressed_sparse ? "compressed sparse" : "heavily compressed",
                           layer.kv_compress_ratio, layer.compressed_sparse ? ", with its indexer key" : "",
                           layer.window);
    } else {
      k.name = windowed ? fmt::format("{} window {}", attention_mask_name(layer.mask), layer.window) : "full";
    }
    auto same =
        std::find_if(kinds.begin(), kinds.end(), [&](const KvLayerKind& o) { return o.name == k.name; });
    if (same == kinds.end()) {
      k.layers = 1;
      kinds.push_back(k);
    } else {
      ++same->layers;
    }
  }
  return kinds;
}

uint64_t recurrent_state_bytes_per_layer(const ModelSpec& spec, KvDtype window_dtype) {
  if (spec.mamba) {  // the conv window [K - 1, x B C] and the float32 SSM state [heads, head_dim, state]
    const MambaSpec& m = *spec.mamba;
    return static_cast<uint64_t>(m.conv_channels() * (m.conv_kernel - 1)) *
               static_cast<uint64_t>(kv_dtype_bytes(window_dtype)) +
           static_cast<uint64_t>(m.n_heads * m.head_dim * m.state_size) * 4u;
  }
  if (!spec.linear_attention) return 0;
  const LinearAttentionSpec& la = *spec.linear_attention;
  const auto window = static_cast<uint64_t>(la.conv_channels() * (la.conv_kernel - 1)) *
                      static_cast<uint64_t>(kv_dtype_bytes(window_dtype));
  const auto state = static_cast<uint64_t>(la.n_value_heads * la.key_head_dim * la.value_head_dim) * 4u;
  return window + state;
}

uint64_t compressed_kv_state_bytes_per_layer(const ModelSpec& spec, const LayerSpec& layer) {
  if (layer.kv_compress_ratio <= 0 || !spec.compressed_kv || !layer_has_kv(layer)) return 0;
  const int64_t m = layer.kv_compress_ratio, d = spec.head_dim;
  // Per compressor: tail kv and gate [m - 1, C]; with overlap, prior kv and gate [m, width].
  const auto floats = [m](int64_t channels, int64_t width, bool overlap) {
    return 2 * (m - 1) * channels + (overlap ? 2 * m * width : 0);
  };
  int64_t n = floats(layer.compressed_sparse ? 2 * d : d, d, layer.compressed_sparse);
  if (layer.compressed_sparse) {
    const int64_t di = spec.compressed_kv->index_head_dim;
    n += floats(2 * di, di, true);
  }
  return static_cast<uint64_t>(n) * 4u;
}

uint64_t recurrent_state_bytes_per_sequence(const ModelSpec& spec, KvDtype window_dtype) {
  const auto layers = static_cast<uint64_t>(count_recurrent_layers(spec));
  uint64_t compressed = 0;
  for (const LayerSpec& l : spec.layers) compressed += compressed_kv_state_bytes_per_layer(spec, l);
  return layers * recurrent_state_bytes_per_layer(spec, window_dtype) + compressed;
}

KvCacheSummary kv_cache_summary(const ModelSpec& spec, KvDtype dtype) {
  KvCacheSummary s;
  s.dtype = dtype;
  s.element_bits = 8 * kv_dtype_bytes(dtype);
  if (spec.shared_kv_low_rank) {
    s.layout = fmt::format("one key = value head x {} per layer", spec.head_dim);
    if (spec.compressed_kv) s.layout += ", plus compressed entries on compressed layers";
  } else if (spec.attention == AttentionKind::kMla && spec.mla) {
    s.layout = fmt::format("MLA: latent {} + rope key {} per layer", spec.mla->kv_lora_rank,
                           spec.mla->qk_rope_head_dim);
    if (spec.indexer) s.layout += fmt::format(" + indexer key {}", spec.indexer->head_dim);
  } else {
    s.layout = fmt::format("GQA: K+V, {} KV heads x {} per layer", max_kv_heads(spec), spec.head_dim);
    if (value_head_dim(spec) != spec.head_dim) s.layout += fmt::format(" (values {})", value_head_dim(spec));
    if (max_kv_heads(spec) != spec.n_kv_heads) {
      s.layout += fmt::format(", rows sized for the widest layer ({} KV heads in others)", spec.n_kv_heads);
    }
    if (max_key_width(spec) != max_kv_heads(spec) * spec.head_dim) {
      s.layout += fmt::format(", rows of {} + {} sized for the widest layer's keys and values",
                              max_key_width(spec), max_value_width(spec));
    }
    if (spec.block_indexer) s.layout += fmt::format(" + block index key {}", spec.block_indexer->head_dim);
  }
  s.kv_layers = count_kv_layers(spec);
  s.state_layers = count_recurrent_layers(spec);
  if (s.kv_layers < spec.n_layers) s.layout += fmt::format(" in {} of {} layers", s.kv_layers, spec.n_layers);
  if (s.state_layers > 0) {
    s.layout += fmt::format("; {} {} layers keep a fixed state per sequence", s.state_layers,
                            spec.mamba ? "Mamba-2" : "Gated DeltaNet");
  }
  s.bytes_per_token = kv_bytes_per_token_per_layer(spec, dtype) * static_cast<uint64_t>(s.kv_layers);
  s.bytes_per_1k_tokens = kv_cache_bytes(spec, 1000, dtype);
  s.kinds = kv_layer_kinds(spec, dtype);
  for (const KvLayerKind& k : s.kinds) {
    s.bytes_per_token_past_windows +=
        static_cast<double>(k.layers) *
        (k.compressed_bytes_per_token + (k.window > 0 ? 0.0 : k.raw_bytes_per_token));
  }
  s.bounded_layers = spec.n_layers - count_masked_layers(spec, AttentionMask::kCausal);
  s.state_bytes_per_sequence = recurrent_state_bytes_per_sequence(spec, KvDtype::kBF16);
  return s;
}

std::vector<WeightMemoryRow> weight_memory_table(const ModelSpec& spec, const ParamCounts& counts) {
  std::vector<WeightMemoryRow> rows;
  const auto total = static_cast<uint64_t>(counts.total);
  // Saturate rather than wrap for absurd (but int64-representable) parameter counts.
  const uint64_t fp32 = checked_mul(total, uint64_t{4}).value_or(UINT64_MAX);
  const uint64_t bf16 = checked_mul(total, uint64_t{2}).value_or(UINT64_MAX);
  rows.push_back({"FP32", 32, fp32});
  rows.push_back({"BF16", 16, bf16});
  rows.push_back({"FP8", 8, total});
  rows.push_back({"INT8", 8, total});
  rows.push_back({"INT4", 4, (total + 1) / 2});
  const double bits =
      counts.total > 0 ? 8.0 * static_cast<double>(counts.stored_bytes) / static_cast<double>(total) : 0.0;
  std::string format = spec.weights.packed.bits != 0 ? packed_int_label(spec.weights.packed)
                                                     : std::string(weight_format_name(spec.weights.format));
  if (spec.weights.nvfp4.layout != Nvfp4Layout::kNone) format = "NVFP4 + " + format;  // the rest unquantized
  rows.push_back({fmt::format("checkpoint ({})", format), bits, counts.stored_bytes});
  return rows;
}

ActivatedWeights activated_weights_per_token(const ModelSpec& spec) {
  ActivatedWeights a;
  auto manifest = build_tensor_manifest(spec);
  if (!manifest.is_ok()) return a;
  const double routed_share =
      spec.moe && spec.moe->n_experts > 0
          ? static_cast<double>(spec.moe->experts_per_token) / static_cast<double>(spec.moe->n_experts)
          : 1.0;
  for (const auto& t : manifest->tensors) {
    if (t.mtp || (t.role == TensorRole::kEmbedding && !spec.tie_word_embeddings)) continue;
    const bool routed = t.role == TensorRole::kRoutedExpert ||
                        (t.role == TensorRole::kQuantScale && t.scaled_role == TensorRole::kRoutedExpert);
    const double share = routed ? routed_share : 1.0;
    a.bytes += static_cast<double>(t.bytes) * share;
    if (t.role != TensorRole::kNorm && t.role != TensorRole::kQuantScale)
      a.matmul_params += static_cast<double>(t.params) * share;
  }
  return a;
}

}  // namespace day0
