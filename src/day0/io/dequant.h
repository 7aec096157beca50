#pragma once
// Whole-tensor conversions to F32 / BF16, and dequantization of the two block formats releases use
// (docs/models.md, "Element encodings", "FP8 blocks" and "MXFP4"):
//  - F8_E4M3 weights [M, K] with F32 `weight_scale_inv` [ceil(M/128), ceil(K/128)] (edge blocks partial):
//    W[i, j] = f8(Wq[i, j]) * S[i / 128, j / 128], the product rounded once to F32 as the reference does.
//  - MXFP4: U8 blocks [..., G, 16] of e2m1 pairs (element 2j in the low nibble of byte j, 2j+1 in
//    the high one) and E8M0 scales [..., G]: value = fp4 * 2^(scale - 127); output [..., G * 32].
//  - NVFP4: the same nibbles (low nibble = even column, bit 3 the sign) with an FP8 E4M3 scale per 16
//    values and one float32 multiplier g per tensor: value = fp4 * (e4m3(scale) * g), the scale product
//    rounded to F32 first (WeightView::at's definition, which the kernels follow).
// BF16 results round the F32 value to nearest even (what torch's .to(bfloat16) does).
#include <cstdint>
#include <span>
#include <vector>

#include "day0/core/status.h"
#include "day0/io/safetensors_file.h"

namespace day0 {

// Every element as F32 (exact for all float types; integers above 2^24 round). kUnsupported for F4.
Result<std::vector<float>> tensor_to_f32(const TensorView& t);
Result<std::vector<uint16_t>> tensor_to_bf16(const TensorView& t);
std::vector<uint16_t> f32_to_bf16_vector(std::span<const float> values);

// Raw form: `weight` rows x cols bytes, `scale` s_rows x s_cols F32 with s_rows = ceil(rows / block_rows),
// s_cols = ceil(cols / block_cols); `out` rows x cols. The caller guarantees the sizes (D0_CHECK).
void dequant_fp8_block(std::span<const uint8_t> weight, int64_t rows, int64_t cols,
                       std::span<const float> scale, int64_t block_rows, int64_t block_cols,
                       std::span<float> out);
// Checked form over tensor views: weight F8_E4M3 2-D, scale F32 or BF16 of the matching block grid, or
// ue8m0 exponent bytes (F8_E8M0 or U8: 2^(u - 127), 0xFF NaN).
Result<std::vector<float>> dequant_fp8_block(const TensorView& weight, const TensorView& scale_inv,
                                             int64_t block_rows = 128, int64_t block_cols = 128);

// Raw form: n_groups groups of 16 bytes and one scale byte each; out holds n_groups * 32 values.
void dequant_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<float> out);
// FP4 E2M1 with an E8M0 scale per `group` (16 or 32) consecutive values: `packed` two values a byte (low
// nibble first), one scale byte per group (0xFF NaN); out = scales.size() * group values.
void dequant_fp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int64_t group,
                 std::span<float> out);
// Checked form for DeepSeek-V4's FP4 projections: `weight` I8 (or U8) [rows, cols / 2] and
// `weight_scale_inv` E8M0 (or U8) [rows, cols / group]; the group (32 or 16) is read off the scale grid.
Result<std::vector<float>> dequant_fp4(const TensorView& weight, const TensorView& scales);
// NVFP4's per-tensor global scale as the multiplier g of dequant_nvfp4. ModelOpt stores g itself
// (`weight_scale_2` = amax / (6 * 448) at quantization); compressed-tensors stores its inverse
// (`weight_global_scale` = 6 * 448 / amax) and divides the group scale by it, so g = 1 / stored. Ours
// multiplies by that reciprocal: the values differ from a division by at most a float32 rounding of the
// scale. A stored 0 gives g = 0 (ModelOpt) or +Inf (compressed-tensors): both decode as written.
enum class Nvfp4GlobalScale { kMultiplier, kDivisor };
float nvfp4_global_multiplier(float stored, Nvfp4GlobalScale convention);
// Raw form: `packed` two values a byte (low nibble first), one E4M3 byte per 16 values;
// out = scales.size() * 16 values.
void dequant_nvfp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales, float global_multiplier,
                   std::span<float> out);
// Checked form: `weight` U8 (or I8) [rows, cols / 2] and `scales` F8_E4M3 [rows, cols / 16] -> [rows, cols].
Result<std::vector<float>> dequant_nvfp4(const TensorView& weight, const TensorView& scales,
                                         float global_multiplier);
// Checked form: blocks U8 [..., G, 16], scales U8 (or F8_E8M0) [..., G]. The output shape is
// mxfp4_dequant_shape(blocks.shape).
Result<std::vector<float>> dequant_mxfp4(const TensorView& blocks, const TensorView& scales);
std::vector<int64_t> mxfp4_dequant_shape(std::span<const int64_t> blocks_shape);

}  // namespace day0
