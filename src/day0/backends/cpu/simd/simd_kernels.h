#pragma once
// The per-ISA inner loops of the cpu backend. One table per SimdLevel, compiled in its own file
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp) with that ISA's flags; the drivers
// (cpu_matmul.cpp, cpu_attention.cpp, ...) only call through the table, so every level runs the
// same blocking and threading and differs only here.
#include <cstdint>
#include <vector>

#include "day0/backends/cpu/simd_level.h"
#include "day0/ops/tensor.h"

namespace day0::cpu {

// Packed GEMM operands: B is a [kc][kNr] panel of floats (kNr weight rows side by side), A a [kc][kMr]
// tile of x (kMr rows side by side, zeros past the last row). Every level uses the same tile sizes so
// the driver is shared.
inline constexpr int64_t kNr = 32;
inline constexpr int64_t kMr = 6;
// The widest tile of queries attend_span_lanes takes (lanes: a tile's rows x the heads of a KV group).
inline constexpr int64_t kMaxAttentionLanes = 1024;

struct AmxBlock;  // below

struct SimdKernels {
  SimdLevel level;
  // y[i] = sum_k x[k] * W[n0 + i, k] for n0 <= n0 + i < n1, dequantising on the fly.
  // For MXFP4, x must be in mxfp4_order (see prepare_mxfp4_x); other formats take x as is.
  void (*dot_rows)(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y);
  // out[j] = W[n, k0 + j] for j < len. For FP8 and MXFP4, k0 and len are multiples of the block
  // width (128 / 32) except for the last block of the row.
  void (*dequant_row)(const WeightView& w, int64_t n, int64_t k0, int64_t len, float* out);
  // C[i, j] (+)= sum_k a[k][i] * b[k][j] for i < mr (<= kMr), j < nr (<= kNr); a packed [kc][kMr] (rows
  // past mr finite, e.g. zero), b packed [kc][kNr]. accumulate = false overwrites C.
  void (*gemm_tile)(int64_t mr, int64_t nr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                    bool accumulate);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, int64_t n);  // y += alpha x
  void (*scale)(float alpha, float* y, int64_t n);                 // y *= alpha
  // BF16 GEMM tile with vdpbf16ps (null where the CPU lacks AVX-512 BF16): C[i, j] (+)= sum over
  // pairs p < kp of a[p][i] . b[p][j] for i < mr, j < nr, where a is a tile of x packed [kp][kMr] pairs
  // of BF16 (x rounded to BF16; rows past mr may hold anything finite) and b a weight panel packed
  // [kp][kNr] pairs of BF16 (pack_bf16_panel).
  void (*gemm_tile_bf16)(int64_t mr, int64_t nr, int64_t kp, const uint32_t* a, const uint32_t* b, float* c,
                         int64_t ldc, bool accumulate);
  // out[i] = bf16(x[i]) round to nearest even, i < n.
  void (*to_bf16)(const float* x, int64_t n, uint16_t* out);
  // s[i] = exp(s[i] - shift) (shift >= every s[i], e.g. the row max); returns the sum.
  float (*exp_sum)(float* s, int64_t n, float shift);
  // INT8 / INT4 weights against int8 activations (ops/int8_activations.h: codes xq padded to whole
  // 32-column blocks, one scale xs per block): y[i] = sum over blocks b of scale_w[n, g(b)] * xs[b] *
  // sum_{k in b} (c[n, k] - z) * xq[k], n = n0 + i, with z = 8 for symmetric INT4 (no zero points
  // stored), subtracted inside the exact integer sum, else 0: stored zero points are subtracted by the
  // driver (scale_w * z * the activation group terms).
  void (*dot_rows_int)(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                       float* y);
  // Which instruction the integer dot products use: "scalar", "avx2-maddubs", "avx-vnni",
  // "avx512-vnni" (printed by benchmarks and `run`).
  const char* int_dot_name = "scalar";
  // The INT8 / INT4 GEMM of a prompt on AMX-INT8 tiles (null where the CPU lacks AMX-INT8). Rows n0 + i,
  // i < rows <= kIntTileRows, against `tokens` activation rows packed by pack_int_x_tiles (xp, xsp):
  //   out[t * ldo + i] = the sum over blocks b, in order from 0, of float(codes . xq over block b) *
  //   (xs[t][b] * scale_w[n0 + i, g(b)]),
  // each term a multiply then an add (no fused multiply-add), as dot_rows_int_scalar: every bit equal to
  // it, the block dots being exact integers. w_pack: kIntTileRows * blocks * 32 bytes of scratch,
  // 64-byte aligned (the rows' codes as whole tiles, INT4 widened to bytes).
  void (*gemm_int_amx)(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xp, const float* xsp,
                       int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo) = nullptr;
  // The INT8 / INT4 GEMM of a prompt on 256-bit integer dot products (null where the level has none):
  // rows n0 + i, i < rows <= kIntPanelRows, against `tokens` activation rows in Int8Rows' layout (codes
  // xq + t * blocks * 32, scales xs + t * blocks, code sums xsum + t * blocks; blocks = ceil(cols / 32)):
  // out[t * ldo + i] = dot_rows_int_scalar's value, bit for bit, as gemm_int_amx. w_pack:
  // gemm_int_pack_bytes(w) bytes of scratch, 32-byte aligned.
  void (*gemm_int)(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xq, const float* xs,
                   const int32_t* xsum, int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo) = nullptr;
  // Row dots on a token's codes laid out once per call (null where the level has none): prepare_int_x
  // writes int_x_prepared_bytes(cols) bytes (32-byte aligned) from the token's codes and scales and
  // returns whether it serves w's format (false: use dot_rows_int); dot_rows_int_prepared then gives
  // what dot_rows_int gives, up to float rounding (its own order, the same for every call), with xq / xs
  // the token's codes and scales as well. At the avx2 level: INT4, two blocks from one 32-byte load.
  bool (*prepare_int_x)(const WeightView& w, const int8_t* xq, const float* xs, uint8_t* out) = nullptr;
  void (*dot_rows_int_prepared)(const WeightView& w, int64_t n0, int64_t n1, const uint8_t* prepared,
                                const int8_t* xq, const float* xs, float* y) = nullptr;
  // One activation row quantized for the integer kernels, every code, scale and sum equal to
  // quantize_activation_row's (ops/int8_activations.h), which the driver calls where this is null.
  void (*quantize_int8_row)(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum) = nullptr;
  // AMX BF16 GEMM (both null below SimdLevel::kAmx), see AmxBlock and cpu_matmul.cpp.
  // x rows [0, rows) of k floats (row stride ldx), rounded to BF16 like to_bf16, into the tiles' right
  // operand for the x rows m0 + r (m0 a multiple of 16): xp[((m0 + r) / 16 * pairs + p) * 16 + (m0 + r) % 16]
  // = (x[r][2p], x[r][2p + 1]) for p < pairs = k_pad / 2, zero past k; rows up to the next multiple of 16 are
  // written as zeros. One B tile (16 pairs x 16 rows of x) is then 1 KiB of contiguous memory.
  void (*amx_pack_x)(const float* x, int64_t ldx, int64_t rows, int64_t k, int64_t k_pad, uint32_t* xp,
                     int64_t m0) = nullptr;
  void (*gemm_bf16_amx)(const AmxBlock& b) = nullptr;
  // The weight panel of gemm_tile_bf16 (set with it): packed[p][j] = (W[j][k0 + 2p], W[j][k0 + 2p + 1])
  // for p < (kc + 1) / 2, j < kNr, with W[j][k] at w[j * ldw + k]; zero for j >= rows, k >= k0 + kc.
  void (*pack_bf16_panel)(const uint16_t* w, int64_t ldw, int64_t rows, int64_t k0, int64_t kc,
                          uint32_t* packed) = nullptr;
  // The float panel of gemm_tile: packed[k][j] = W[n0 + j][k0 + k] dequantised, for k < kc (<= 256),
  // j < kNr, zero for j >= rows; k0 and kc as for dequant_row. Null: the driver dequantises row by row
  // and transposes.
  void (*pack_f32_panel)(const WeightView& w, int64_t n0, int64_t rows, int64_t k0, int64_t kc,
                         float* packed) = nullptr;
  // y[i] += sum over j < rows, in order, of alpha[j] * x[j * ldx + i], for i < n: axpy row after row with
  // y held in registers (bit for bit the same as `rows` axpy calls). Null: the driver calls axpy.
  void (*axpy_rows)(const float* alpha, const float* x, int64_t ldx, int64_t rows, float* y,
                    int64_t n) = nullptr;
  // out[j] = dot(a, b + j * ldb, n) for j < rows, bit for bit as `dot` computes each (several rows per
  // pass share the loads of a). Null: the driver calls dot.
  void (*dot_many)(const float* a, const float* b, int64_t ldb, int64_t rows, int64_t n,
                   float* out) = nullptr;
  // y[t * ldy + i] = what dot_rows(w, n0, n1, xs[t], ...) gives for row n0 + i, bit for bit, t < nx: several
  // x against the same rows, each weight loaded and widened once for all of them (MoE experts with a few
  // tokens, decode batches). Null: the driver calls dot_rows per x.
  void (*dot_rows_multi)(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, int64_t nx,
                         float* y, int64_t ldy) = nullptr;
  // A level's own layout of x for the row dots of w (both null, or order_x false: x as it is). order_x
  // lays x (as dot_rows takes it) out in out [w.cols]; dot_rows_ordered then gives dot_rows' bits for the
  // same rows. A driver lays x out once per call this way rather than once per dot_rows call (the FP8
  // byte tables and FP4 wide steps take x permuted within each step).
  bool (*order_x)(const WeightView& w, const float* x, float* out) = nullptr;
  void (*dot_rows_ordered)(const WeightView& w, int64_t n0, int64_t n1, const float* xo, float* y) = nullptr;
  // BF16 rows against x given in BF16 (rounded once per call, to_bf16), by vdpbf16ps: the precision of
  // the BF16 GEMM (products of BF16 pairs summed in float32), for calls that are not `exact`. Each
  // 64-byte line of weights is two instructions where widening it to float32 is six, so decode streams
  // closer to the memory bound. y[t * ldy + i] = row n0 + i . xbs[t] for t < nx, each (row, x) bit for
  // bit what nx = 1 gives. Null: the level has no BF16 dot.
  void (*dot_rows_bf16x)(const WeightView& w, int64_t n0, int64_t n1, const uint16_t* const* xbs, int64_t nx,
                         float* y, int64_t ldy) = nullptr;
  // A few x (a serving step's tokens) against BF16 rows without packing the weights. x is packed once per
  // call, 16 rows per tile, by pack_bf16_x16 (rows <= 16 of them into one tile): xt[p][t] = (bf16(x[t][2p]),
  // bf16(x[t][2p + 1])) for p < (cols + 1) / 2, t < 16, zero for t >= rows and in an odd half pair. Then
  // dot_rows_bf16_x16 takes `tiles` such tiles one after another in xt and gives out[(j * rows + i) * 16 +
  // t] = sum over pairs p, in order, of row i's pair p . tile j's xt[p][t] (vdpbf16ps with the weight pair
  // broadcast), for i < rows, t < 16; W[i][k] at w[i * ldw + k]. A token's sums are the same whatever else
  // the lanes and tiles hold. Both null where the level has no BF16 dot.
  void (*pack_bf16_x16)(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint32_t* xt) = nullptr;
  void (*dot_rows_bf16_x16)(const uint16_t* w, int64_t ldw, int64_t rows, int64_t cols, const uint32_t* xt,
                            int64_t tiles, float* out) = nullptr;
  // SwiGLU of 16 token lanes straight into an activation tile of BF16 pairs (pack_bf16_x16's layout), for
  // MoE experts on those tiles: a[c][l] = silu_mul of g[c * ld + l] and u[c * ld + l] for c < n, l < lanes
  // (0 in lanes past them); act[c / 2 * 16 + l] = (bf16(a[c][l]), bf16(a[c + 1][l])) for even c, the upper
  // half 0 past n. Each a has silu_mul's bits. Null where the level has no BF16 dot.
  void (*swiglu_pack_x16)(const float* g, const float* u, int64_t ld, int64_t n, int64_t lanes,
                          uint32_t* act) = nullptr;
  // A tile of dot_rows_bf16_x16's out ([rows][16 lanes]) into its tokens' rows, for r < rows, l < lanes:
  // v = tile[r * 16 + l] + bias[r] (bias null: + 0), then out_rows[l][r] = fma(w[l], v, out_rows[l][r])
  // when accumulating, else w[l] * v (w null: 1, so v itself, or out + v rounded once). The bits of the
  // same arithmetic element by element. Null where the level has no BF16 dot.
  void (*lanes_to_rows_x16)(const float* tile, int64_t rows, int64_t lanes, const float* bias, const float* w,
                            bool accumulate, float* const* out_rows) = nullptr;
  // Attention scores of a tile of queries against a span of keys, queries in lanes: st[j * ldq + i] = the
  // chain of fused multiply-adds over c < d, in order from 0, of k[j * ldk + c] * qt[c * ldq + i], for j < n
  // and every i < ldq (a multiple of 8; qt holds the queries transposed, zeros past the last). Each score
  // has the same bits at every level and whatever else the tile holds. Null: the driver runs the chain
  // with std::fma.
  void (*key_query_dots)(const float* k, int64_t ldk, int64_t n, const float* qt, int64_t ldq, int64_t d,
                         float* st) = nullptr;
  // BF16 rows widened to float32 (exact): out[r * cols + c] = src[r * ld + c] for r < rows, c < cols (a
  // page's rows of one KV head, `ld` the cache row's width). Null: the driver widens element by element.
  void (*widen_bf16_rows)(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* out) = nullptr;
  // One span of keys against a tile of queries held in lanes (paged attention's online softmax, after
  // key_query_dots). Lane i < nq sees key j < n when pos + j lies in [lo[i], hi[i]]; its scores are
  // st[j * ldq + i] * scale. Lane i's state is states[i * stride ...]: acc [dv], m, sum. Per lane with a
  // visible key: m' = max(m, its largest score); when m' > m, sum and acc are scaled by exp(m - m') (0
  // while m is -inf); then sum += the exponentials exp(s - m') of its visible scores (added in key
  // order) and acc += exp(s - m') v[j] over them in key order, each a fused multiply-add as axpy_rows
  // adds them. Keys a lane does not see add nothing. st is overwritten; ldq <= kMaxAttentionLanes. Null:
  // the driver runs each query on its own (exp_sum, axpy_rows).
  void (*attend_span_lanes)(float* st, int64_t ldq, int64_t nq, int64_t n, int64_t pos, const int32_t* lo,
                            const int32_t* hi, float scale, const float* v, int64_t ldv, int64_t dv,
                            float* states, int64_t stride) = nullptr;
  // y[i] = float(bf16(x[i])) for i < n, to nearest even (to_bf16 widened back, in registers; y may be x).
  // Null: the driver goes through to_bf16 and dequant_row.
  void (*round_bf16)(const float* x, int64_t n, float* y) = nullptr;
  // out[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n (SwiGLU), the exponential by the level's polynomial
  // (relative error ~2e-7, as exp_sum's). Null: the driver calls std::exp per element.
  void (*silu_mul)(const float* g, const float* u, int64_t n, float* out) = nullptr;
};

// One 32-row block of weights times every column of x^T over one K block, on AMX tiles:
//   acc[n][m] = (first ? 0 : stage[n][m]) + sum_{k < kc} W[n][k] x[m][k], n < 32, m < mpad;
// stored to the stage, or, in the last K block, transposed into y: y[m][n] (+)= acc[n][m] + bias[n] for
// m < rows, n < cols. The kernel first copies the weight block into w_pack as whole tiles (contiguous
// 1 KiB each: rows of a checkpoint matrix are often 4 KiB apart, all in one L1 set).
struct AmxBlock {
  const uint16_t* w = nullptr;  // W[n][k] at w[n * ldw + k]: rows n < w_rows, columns k < w_cols valid
  int64_t ldw = 0;
  int64_t w_rows = 32, w_cols = 0;  // past them the block is zero
  uint16_t* w_pack = nullptr;       // [32 * kc] scratch of the calling thread, 64-byte aligned
  const uint32_t* xp = nullptr;     // packed x^T of every row (amx_pack_x), pair rows [k0 / 2, ...)
  int64_t pairs = 0;                // pair rows per 16-row block of xp (k_pad / 2)
  int64_t k0 = 0;                   // this K block's first column
  int64_t mpad = 0;                 // a multiple of 32
  int64_t kc = 0;                   // a multiple of 32
  float* stage = nullptr;           // [32][mpad] partial sums between K blocks (unused when first && last)
  bool first = true, last = true;
  float* y = nullptr;  // y[m][n0 + n]: the block's first column, row stride ldy
  int64_t ldy = 0;
  int64_t rows = 0, cols = 0;   // valid m < rows (<= mpad) and n < cols (<= 32)
  const float* bias = nullptr;  // [cols] or null
  bool accumulate = false;      // add to y instead of overwriting it
};

// Weight rows per gemm_int_amx call (two 16-row tiles).
inline constexpr int64_t kIntTileRows = 32;
// Weight rows per gemm_int call, and the scratch it packs them into (kernels_int_avx2.cpp).
inline constexpr int64_t kIntPanelRows = 8;
int64_t gemm_int_pack_bytes(const WeightView& w);
void gemm_int_avx2(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xq, const float* xs,
                   const int32_t* xsum, int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo);
// SimdKernels::prepare_int_x / dot_rows_int_prepared at the avx2 level (kernels_int_avx2.cpp).
int64_t int_x_prepared_bytes(int64_t cols);
bool prepare_int_x_avx2(const WeightView& w, const int8_t* xq, const float* xs, uint8_t* out);
void dot_rows_int_prepared_avx2(const WeightView& w, int64_t n0, int64_t n1, const uint8_t* prepared,
                                const int8_t* xq, const float* xs, float* y);
// Activations of gemm_int_amx, 16 token rows per tile: for tile u and block b (blocks = ceil(cols / 32)),
//   xp[(u * blocks + b) * 512 + q * 64 + t * 4 + j] = xq[16 u + t][32 b + 4 q + j]  (q < 8, j < 4),
//   xsp[(u * blocks + b) * 16 + t] = xs[16 u + t][b],
// zero for rows past `rows` (a tile operand of 8 rows x 64 bytes: four columns of each of 16 tokens per
// row). xp holds ceil(rows / 16) * blocks * 512 bytes, xsp ceil(rows / 16) * blocks * 16 floats.
void pack_int_x_tiles(const int8_t* xq, const float* xs, int64_t rows, int64_t blocks, int8_t* xp,
                      float* xsp);

const SimdKernels& scalar_kernels();
const SimdKernels& avx2_kernels();
const SimdKernels& avx512_kernels();
const SimdKernels& amx_kernels();  // kernels_amx.cpp
const SimdKernels& kernels_for(SimdLevel level);

// MXFP4 dot products pair the low nibbles of a 16-byte block with the even elements of x and the high
// nibbles with the odd ones: within each 32-element block, out holds x[0], x[2], ..., x[30], x[1],
// x[3], ..., x[31]. n must be a multiple of 32.
void prepare_mxfp4_x(const float* x, int64_t n, float* out);

// Every build of SimdKernels::dot_rows_int, so that tests can run each one this CPU supports (a level's
// table holds the best of its level: VNNI where present).
using DotRowsInt = void (*)(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                            float* y);
void dot_rows_int_scalar(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                         float* y);
void dot_rows_int_avx2(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                       float* y);
void dot_rows_int_avx_vnni(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                           float* y);  // kernels_int_vnni_avx2.cpp; needs cpu_has_avx_vnni()
void dot_rows_int_avx512_maddubs(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq,
                                 const float* xs, float* y);
void dot_rows_int_avx512_vnni(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                              float* y);  // needs cpu_has_avx512_vnni()
// SimdKernels::quantize_int8_row at the avx512 level (kernels_int_avx512.cpp).
void quantize_int8_row_avx512(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum);
void quantize_int8_row_avx2(const float* x, int64_t n, int8_t* q, float* scale,
                            int32_t* sum);  // kernels_int_avx2.cpp
struct IntDotVariant {
  const char* name;  // "scalar", "avx2-maddubs", "avx-vnni", "avx512-maddubs", "avx512-vnni"
  DotRowsInt fn;
};
std::vector<IntDotVariant> int_dot_variants();  // those this CPU can run

}  // namespace day0::cpu
