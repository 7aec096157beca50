#pragma once
// Quantizers producing the release formats from F32 values: what `day0 synth` uses to write FP8
// block-scaled and MXFP4 miniatures (NVFP4 for tests), and the inverse that tests check dequant.h against.
#include <cstdint>
#include <span>
#include <vector>

namespace day0 {

// F32 -> float8 e4m3fn, round to nearest even, saturating at +-448 (NaN -> 0x7f).
uint8_t f32_to_f8e4m3(float value);
// F32 -> FP4 e2m1 nibble, round to nearest even among {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6.
uint8_t f32_to_fp4_e2m1(float value);

struct Fp8BlockQuantized {
  std::vector<uint8_t> values;   // rows x cols F8_E4M3
  std::vector<float> scale_inv;  // ceil(rows/br) x ceil(cols/bc), multiplier per block
};
// Per block: scale = amax / 448 (1 for an all-zero block), value = f8(x / scale). With pow2_scales the
// scale is rounded up to a power of two (scale_fmt "ue8m0").
Fp8BlockQuantized quantize_fp8_block(std::span<const float> weight, int64_t rows, int64_t cols,
                                     int64_t block_rows, int64_t block_cols, bool pow2_scales = false);

struct Mxfp4Quantized {
  std::vector<uint8_t> blocks;  // values / 2 bytes, two a byte (low nibble first)
  std::vector<uint8_t> scales;  // one E8M0 byte per group
};
// `values.size()` must be a multiple of 32; groups are consecutive runs of `group` (32: MXFP4, or 16).
// Scale exponent e = ceil(log2(amax / 6)) so that the largest magnitude fits e2m1 without saturating.
Mxfp4Quantized quantize_mxfp4(std::span<const float> values, int64_t group = 32);

struct Nvfp4Quantized {
  std::vector<uint8_t> packed;     // values / 2 bytes, two a byte (low nibble first)
  std::vector<uint8_t> scales;     // one E4M3 byte per 16 values
  float global_multiplier = 1.0f;  // g (ModelOpt's weight_scale_2; compressed-tensors stores 1 / g)
};
// NVFP4 over one tensor (`values.size()` a multiple of 16): g = amax / (6 * 448) (1 for all zeros) so the
// largest group scale fits E4M3; per group scale = e4m3(group amax / 6 / g), value = e2m1(x / (scale * g)).
Nvfp4Quantized quantize_nvfp4(std::span<const float> values);

}  // namespace day0
