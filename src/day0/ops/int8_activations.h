#pragma once
// Activations quantized to int8 on the fly for the INT8 / INT4 weight kernels (the non-exact matmul of
// integer weights, MatmulArgs::exact = false). One scale per block of kIntBlock (32) consecutive
// columns of a row: scale = amax / 127 and q = round-half-even(x * 127 / amax), clamped to
// [-127, 127]. Never -128, so that the AVX2 sign trick (negating x where the weight is negative)
// cannot overflow. A block of zeros gets scale 0; a block holding a NaN or an infinity gets a NaN
// scale (and zero codes), so that the NaN reaches the output as in float arithmetic.
//
// Error: |x - q * scale| <= scale / 2 = amax / 254 per element, so a dot product with a weight row w
// differs from the float one by at most sum over blocks b of (amax_b / 254) * sum_{k in b} |w_k|
// (what the differential tests check, plus float32 rounding).
//
// One function shared by the reference backend and the cpu kernels, so both see the same codes.
#include <cstdint>
#include <vector>

#include "day0/ops/tensor.h"

namespace day0 {

struct Int8Rows {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t blocks = 0;        // ceil(cols / 32)
  std::vector<int8_t> q;     // [rows, blocks * 32], zero padded
  std::vector<float> scale;  // [rows, blocks]
  std::vector<int32_t> sum;  // [rows, blocks]: the sum of the codes of each block (zero-point term)

  const int8_t* codes(int64_t r) const { return q.data() + r * blocks * kIntBlock; }
  const float* scales(int64_t r) const { return scale.data() + r * blocks; }
  const int32_t* sums(int64_t r) const { return sum.data() + r * blocks; }
};

// Quantizes every row of x into `out` (its storage is reused; grown, never shrunk).
void quantize_activations(ConstMatrix x, Int8Rows& out);
// Sets out's shape to rows x cols and grows its storage to fit, for callers that quantize the rows
// themselves (the cpu backend: on its threads, with its level's quantize_int8_row).
void size_activations(int64_t rows, int64_t cols, Int8Rows& out);
// Quantizes one row of n floats: q [ceil(n / 32) * 32], scale and sum [ceil(n / 32)].
void quantize_activation_row(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum);

// The zero-point term of row r for weights with `group` columns per scale (a multiple of 32, or >= cols:
// one group): out[g] = sum over the blocks b of group g of scale[b] * sum[b], g < groups.
void activation_group_terms(const Int8Rows& a, int64_t r, int64_t group, int64_t groups, float* out);

}  // namespace day0
