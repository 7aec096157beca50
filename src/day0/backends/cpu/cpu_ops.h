#pragma once
// Drivers of the cpu backend: blocking, threading and the choice between GEMV and GEMM; the inner
// loops come from the SIMD table of the backend's level.
#include <vector>

#include "day0/backends/backend.h"
#include "day0/ops/int8_activations.h"

#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {

// Scratch the kernels keep between calls (grown, never shrunk), so a step allocates nothing once the
// largest shape was seen.
struct PagedItem {
  int32_t seq;
  int64_t t0;
  int64_t g;  // kv head (GQA) or head (MLA)
  int64_t split;
};
struct Workspace {
  std::vector<PagedItem> items;
  std::vector<float> partial;
  std::vector<std::vector<float>> thread;         // per pool thread
  std::vector<std::vector<int32_t>> lane_bounds;  // per pool thread: paged attention's lanes' [lo], [hi]
  std::vector<float> gemv_prepared;               // MXFP4 activations in nibble order
  std::vector<float> gemv_ordered;                // [T, K] activations in the level's order (order_x)
  std::vector<uint16_t> gemv_bf16;                // [T, K] activations rounded to BF16 for dot_rows_bf16x
  Int8Rows int8_x;                                // INT8 / INT4 weights: the activations quantized
  std::vector<float> int8_terms;                  // [T, groups] zero-point terms of those
  std::vector<uint8_t> int_x_prepared;            // [T] those laid out by SimdKernels::prepare_int_x
  std::vector<int8_t> int_tiles_x;                // those as gemm_int_amx's tiles (pack_int_x_tiles)
  std::vector<float> int_tiles_xs;
  std::vector<std::vector<uint8_t>> int_tiles_w;  // per pool thread: gemm_int_amx's w_pack
  // moe_experts dispatch
  std::vector<int64_t> moe_start, moe_fill, moe_active, moe_tiled, moe_tile_first;
  std::vector<uint8_t> moe_done;  // [experts]: run by the row dots or the tiles
  std::vector<int32_t> moe_tokens;
  std::vector<float> moe_weights, moe_x, moe_gate_up, moe_act, moe_down;
  std::vector<float> moe_halves;  // one token's gate and up sums de-interleaved, [2, inter]
  std::vector<float> moe_x_ordered, moe_act_ordered;  // [slots, hidden], [slots, inter] in order_x's layout
  std::vector<uint16_t> moe_x_bf16, moe_act_bf16;     // [slots, hidden], [slots, inter] for dot_rows_bf16x
  std::vector<uint32_t> moe_x_tiles, moe_act_tiles;   // x and act of the tiled experts, pack_bf16_x16 tiles
  Int8Rows moe_act_int8;                              // INT experts' row dots: act quantized, [slots, inter]
  std::vector<uint8_t> moe_act_prepared;              // those laid out by SimdKernels::prepare_int_x
  // AMX BF16 GEMM: x^T packed in BF16 pairs, y^T staged, and per thread a zero-padded weight block
  std::vector<uint32_t> amx_x;
  std::vector<float> amx_yt;
  std::vector<std::vector<uint16_t>> amx_w;
  // Packed GEMM: x in tiles of kMr rows (float32, or BF16 pairs), and per thread a weight panel
  std::vector<float> gemm_x;
  std::vector<uint32_t> gemm_x_bf16;
  std::vector<std::vector<float>> gemm_panel;
};

// v grown to at least n elements (never shrunk: workspaces are reused from call to call); its data.
template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// The first 64-byte aligned element of a scratch vector (whose storage is only 16-byte aligned), grown to
// hold `words` from there on.
template <typename T, typename Word>
T* aligned_64(std::vector<Word>& v, int64_t words) {
  grown(v, words + 64 / static_cast<int64_t>(sizeof(Word)));
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

// Rows of BF16 activations for dot_rows_bf16x, each starting on a cache line: the row dots load 64 bytes
// of every x per step, and a load split over two lines costs two, which shows even with x in L1.
// Row t starts at element t * bf16_row_stride(cols) (cols rounded up to 32).
inline int64_t bf16_row_stride(int64_t cols) {
  return (cols + 31) / 32 * 32;
}
inline uint16_t* aligned_bf16_rows(std::vector<uint16_t>& v, int64_t rows, int64_t cols) {
  return aligned_64<uint16_t>(v, rows * bf16_row_stride(cols));
}

struct Context {
  const SimdKernels& k;
  ThreadPool& pool;
  Workspace* ws = nullptr;  // null: kernels use a local one
  // BF16 weights in the GEMM: vdpbf16ps (true) or widened to float32 for the FMA tiles (false; the
  // faster route on CPUs whose vdpbf16ps issues at half the FMA rate). Ignored without AVX-512 BF16.
  bool bf16_dot = true;
};

// Whether a call's BF16 row dots take x rounded to BF16 (dot_rows_bf16x): exactly where the GEMM takes
// vdpbf16ps, so that decode-sized and larger batches of a call round alike.
inline bool bf16x_rows(const Context& c, WeightFormat weights, bool exact) {
  return !exact && c.bf16_dot && weights == WeightFormat::kBF16 && c.k.dot_rows_bf16x != nullptr;
}
inline bool bf16x_rows(const Context& c, const WeightView& w, bool exact) {
  return bf16x_rows(c, w.format, exact);
}

// Decode-sized batches (T <= kGemvMaxRows) stream each weight row once per call through fused
// dequant dot products (bandwidth bound); larger batches run the packed, cache-blocked GEMM. With
// BF16 weights on AVX-512 BF16 CPUs and a call that is not `exact`, the GEMM rounds activations to
// BF16 and uses vdpbf16ps (the precision a BF16 checkpoint is run at by its reference
// implementation) — on AMX tiles at SimdLevel::kAmx — unless Context::bf16_dot says the FMA tiles are
// faster; everything else accumulates float32 products of exactly
// dequantised weights. INT8 / INT4 weights in a call that is not `exact` take int8 activations (quantized
// once per call, ops/int8_activations.h) and integer dot products for every T: weight rows split over the
// pool, and for T > kGemvMaxRows tokens in tiles of kIntTokenTile so that a chunk of weight rows stays in L1
// while the tile's activations stream from L2.
inline constexpr int64_t kGemvMaxRows = 4;
// The row dots of up to kGemvMaxRows tokens take a matrix's rows in chunks of about this many weight
// bytes (at least 8 rows, at most an even share of the threads), in turn from a shared counter, rather
// than one contiguous share each: a thread that the host slows does not hold the other at the join
// (on the shared 2-core hosts, decode matmuls of 1-4 tokens run faster this way than in halves).
inline constexpr int64_t kGemvChunkBytes = 1 << 20;
// From kGemvMaxRows + 1 up to this many tokens, BF16 calls on the dot route skip the GEMM's weight
// packing: SimdKernels::dot_rows_bf16_x16 broadcasts each weight pair against tiles of 16 token lanes.
// Packing is a pass over the weights that a few tokens cannot pay back, so up to 128 tokens the row
// route is faster (most at 8-32 tokens: a serving step's); by 512 tokens the GEMM's packed panels are
// as fast or faster, hence the bound.
inline constexpr int64_t kFewMaxRows = 128;
// MoE experts with at most this many tokens in a call run on row dots (cpu_moe.cpp) rather than a GEMM,
// whose weight panels would be repacked for a handful of tokens.
inline constexpr int64_t kMoeRowDotMaxTokens = 16;
// The least bytes of gate rows one work item of the row-dot experts' gate/up pass reads (cpu_moe.cpp):
// a thread's run before it jumps past the other threads' items. bench-moe-a02b (hidden 1024, BF16):
// 256 columns an item, half an expert. Longer runs keep each thread's reads one stream; half an expert
// was at least as fast as smaller items and as whole experts at 1-16 tokens.
inline constexpr int64_t kMoeItemBytes = 512 * 1024;
// MoE experts with more tokens than that, up to this many, BF16 weights and a call that is not `exact`
// run on dot_rows_bf16_x16 tiles (cpu_moe.cpp) where the level has them and no AMX: all such experts of a
// call in three passes over the pool instead of three matmuls each. Their x tiles (16 tokens x hidden
// BF16 each) stay in L2 while 8 weight rows meet every tile.
inline constexpr int64_t kMoeTileMaxTokens = 256;
// y[t * ldy + i] = row n0 + i of w . xs[t] for t < nx, bit for bit dot_rows: the level's dot_rows_multi
// where it has one, else dot_rows per x.
inline void dot_rows_each(const SimdKernels& k, const WeightView& w, int64_t n0, int64_t n1,
                          const float* const* xs, int64_t nx, float* y, int64_t ldy) {
  if (k.dot_rows_multi != nullptr) {
    k.dot_rows_multi(w, n0, n1, xs, nx, y, ldy);
    return;
  }
  for (int64_t t = 0; t < nx; ++t) k.dot_rows(w, n0, n1, xs[t], y + t * ldy);
}
void matmul(const Context& c, const MatmulArgs& a);
// The unit matmul() runs such a call on (Backend::matmul_unit), from the rule that picks its kernel.
ComputeUnit matmul_unit(const Context& c, WeightFormat weights, bool exact, int64_t rows);
void embedding(const Context& c, const EmbeddingArgs& a);
void attention(const Context& c, const AttentionArgs& a);
// Absorbed form only; the naive form is run by its decomposition on the cpu kernels.
void mla_absorbed(const Context& c, const MlaArgs& a);
void moe_experts(const Context& c, const MoeExpertsArgs& a);
void paged_attention(const Context& c, const PagedAttentionArgs& a);
// Absorbed form; the naive form runs as its decomposition (pages gathered, then mla_attention).
void paged_mla_absorbed(const Context& c, const PagedMlaArgs& a);
// The sparse-attention lightning indexer over the paged cache, one query row per work item.
void indexer_topk(const Context& c, const IndexerTopkArgs& a);
// Block-sparse attention's indexer over the paged cache, one (query row, index head) per work item.
void block_indexer_topk(const Context& c, const BlockIndexerTopkArgs& a);
// Gated DeltaNet: the conv with channels in parallel, the delta rule with value heads in parallel (each
// head's state is its own; tokens in order), the gated norm rows in parallel.
void causal_conv1d(const Context& c, const CausalConv1dArgs& a);
void gated_delta_rule(const Context& c, const GatedDeltaRuleArgs& a);
void ssm_scan(const Context& c, const SsmScanArgs& a);
void gated_rms_norm(const Context& c, const GatedRmsNormArgs& a);

}  // namespace day0::cpu
