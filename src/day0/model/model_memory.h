#pragma once
// Memory figures of a model: KV-cache bytes and weight bytes at common precisions.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/model/kv_dtype.h"
#include "day0/model/model_spec.h"
#include "day0/model/param_count.h"

namespace day0 {

// The two tensors of one layer's cached row per token, in elements (KvPages' first / second): GQA K and V
// of the widest layer (then any block-sparse index key after V); MLA the normalised latent (kv_lora_rank),
// then the shared rope key (qk_rope_head_dim) and any lightning indexer key; one shared key = value head
// (spec.shared_kv_low_rank) the head alone, second empty. The engine's pool is built with these widths.
struct KvRowWidths {
  int64_t first = 0, second = 0;
};
KvRowWidths kv_row_widths(const ModelSpec& spec);
// KV-cache bytes of one layer for one cached token in `dtype`: kv_row_widths() in `dtype`.
// The single source of this figure: the engine's paged pool sizes its blocks with it, `inspect`
// prints it and the planner budgets with it.
uint64_t kv_bytes_per_token_per_layer(const ModelSpec& spec, KvDtype dtype = KvDtype::kBF16);
// A sequence of `tokens` tokens: sliding and chunked layers hold at most their window; linear-attention
// layers (Gated DeltaNet) hold no KV rows.
uint64_t kv_cache_bytes(const ModelSpec& spec, int64_t tokens, KvDtype dtype = KvDtype::kBF16);

// The fixed-size recurrent state of ONE sequence, whatever its length: every linear-attention layer's
// conv window (conv_channels x (K - 1) pre-conv inputs, held in `window`: the activation dtype, as
// transformers keeps it, F32 or BF16) and its delta-rule state (n_value_heads x key_head_dim x
// value_head_dim float32). The engine's caches allocate exactly this (KvCache::state_bytes(), the window
// in the run's activation precision); 0 without linear-attention layers. `inspect` and the planner count
// a BF16 run: 36 such layers of 8192 conv channels (K = 4) and 32 value heads of 128 x 128 hold
// 36 x (8192 x 3 x 2 B + 32 x 128 x 128 x 4 B) = 77,266,944 B.
uint64_t recurrent_state_bytes_per_layer(const ModelSpec& spec, KvDtype window = KvDtype::kBF16);
// Per sequence: every recurrent layer's state, and every compressed KV layer's partial groups
// (compressed_kv_state_bytes_per_layer), all in one state block of the engine's caches.
uint64_t recurrent_state_bytes_per_sequence(const ModelSpec& spec, KvDtype window = KvDtype::kBF16);
// A compressed KV attention layer's partial groups (LayerSpec::kv_compress_ratio m), fixed per sequence:
// its compressor's, and on a compressed sparse layer its indexer's, float32 projections of the tokens
// past the last complete window (kv and gate [m - 1, C]) and with overlapping windows the last window's
// first halves (kv and gate [m, width]). 0 for any other layer.
uint64_t compressed_kv_state_bytes_per_layer(const ModelSpec& spec, const LayerSpec& layer);

// Compressed KV attention (LayerSpec::kv_compress_ratio): the bytes of one compressed entry (head_dim, plus
// the indexer's key on a sparse layer), and its share per source token (entry / ratio). 0 elsewhere.
uint64_t compressed_kv_entry_bytes(const ModelSpec& spec, const LayerSpec& layer,
                                   KvDtype dtype = KvDtype::kBF16);
double compressed_kv_bytes_per_token(const ModelSpec& spec, const LayerSpec& layer,
                                     KvDtype dtype = KvDtype::kBF16);

// The caching layers grouped by kind (full, sliding window w, compressed 1/m + window w, ...): how many,
// the raw rows a token leaves (held at most `window` tokens when window > 0) and the compressed share.
struct KvLayerKind {
  std::string name;  // "sliding window 128", "compressed sparse (1 entry / 4 tokens, ...) + window 128"
  int64_t layers = 0;
  int64_t window = 0;  // 0: raw rows kept for every token
  int64_t compress_ratio = 0;
  double raw_bytes_per_token = 0;         // one layer's row per token (kv_bytes_per_token_per_layer)
  double compressed_bytes_per_token = 0;  // one layer's compressed share per token, never evicted
};
std::vector<KvLayerKind> kv_layer_kinds(const ModelSpec& spec, KvDtype dtype = KvDtype::kBF16);

struct KvCacheSummary {
  std::string layout;  // "MLA: latent 512 + rope key 64", "GQA: K+V, 8 KV heads x 128"
  KvDtype dtype = KvDtype::kBF16;
  int element_bits = 16;         // 8 * kv_dtype_bytes(dtype)
  uint64_t bytes_per_token = 0;  // every layer, unbounded (a long context's marginal token, before windows)
  uint64_t bytes_per_1k_tokens = 0;       // one 1,000-token sequence, windows applied
  int64_t bounded_layers = 0;             // sliding / chunked layers
  int64_t kv_layers = 0;                  // layers that cache K/V rows (all but linear-attention layers)
  int64_t state_layers = 0;               // linear-attention layers (a fixed state per sequence instead)
  uint64_t state_bytes_per_sequence = 0;  // recurrent_state_bytes_per_sequence() (BF16 run), per sequence
  std::vector<KvLayerKind> kinds;         // kv_layer_kinds()
  // What one more token adds to a sequence longer than every window: full layers' rows plus compressed
  // shares (windowed rows are evicted as fast as they come).
  double bytes_per_token_past_windows = 0;
};
KvCacheSummary kv_cache_summary(const ModelSpec& spec, KvDtype dtype = KvDtype::kBF16);

struct WeightMemoryRow {
  std::string format;  // "FP32", "BF16", "FP8", "INT8", "INT4", "checkpoint (fp8_block)"
  double bits_per_param = 0;
  uint64_t bytes = 0;
};
// total params at 32/16/8/8/4 bits, then the checkpoint's own stored bytes (scales included).
std::vector<WeightMemoryRow> weight_memory_table(const ModelSpec& spec, const ParamCounts& counts);

// What one decoded token reads of the checkpoint's weights: everything but the input embedding (a tied
// head reads it as the LM head), the routed experts at their top-k share. `bytes` as stored (scales
// included): the decode roofline is the read bandwidth over it; `matmul_params` the weight elements it
// multiplies by (norms and scales excluded): 2 x that is the matmul FLOPs of a token.
struct ActivatedWeights {
  double bytes = 0;
  double matmul_params = 0;
};
ActivatedWeights activated_weights_per_token(const ModelSpec& spec);

}  // namespace day0
