#pragma once
// Shared by the op benchmarks: large weight matrices in every format, filled quickly with values
// from a small table of normal samples (no NaN/Inf/denormal encodings that could skew timings).
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/core/numeric.h"
#include "day0/ops/tensor.h"

namespace day0::bench {

// Data in 2 MiB pages, as the runtime's checkpoint mappings ask for.
struct OwnedWeight {
  std::vector<uint8_t, HugePageAllocator<uint8_t>> data;
  std::vector<uint8_t> scales;
  WeightView view;
};

// `offset`: bytes the data starts past a 64-byte boundary (safetensors files give tensors 8-byte
// alignment only, so a mapped checkpoint's rows rarely start on a cache line). `fine`: FP8 in 32x32 blocks
// (DeepSeek-V4.1) instead of 128x128, FP4 with a scale per 16 columns instead of 32, INT8 / INT4 in groups
// of 32 (`day0 quantize --group 32`, llama.cpp's Q8_0 / Q4_0 block) instead of 128. `int_scales_or`: how INT8
// / INT4 scales are held; by default as the engine holds a BF16 checkpoint's (INT4 BF16, INT8 float32).
inline OwnedWeight make_weight(WeightFormat format, int64_t rows, int64_t cols, uint64_t seed = 1,
                               size_t offset = 0, bool fine = false,
                               std::optional<ScaleType> int_scales_or = std::nullopt) {
  OwnedWeight w;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  float table[4096];
  for (float& v : table) v = normal(rng);
  const auto n = static_cast<size_t>(rows * cols);
  w.view.format = format;
  w.view.rows = rows;
  w.view.cols = cols;
  switch (format) {
    case WeightFormat::kF32:
      w.data.resize(n * 4);
      for (size_t i = 0; i < n; ++i) std::memcpy(w.data.data() + 4 * i, &table[(i * 7) & 4095], 4);
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      w.data.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const float v = table[(i * 7) & 4095];
        const uint16_t bits = format == WeightFormat::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(w.data.data() + 2 * i, &bits, 2);
      }
      break;
    case WeightFormat::kFp8Block: {
      w.data.resize(n);
      for (size_t i = 0; i < n; ++i) w.data[i] = static_cast<uint8_t>((i * 131 + (i >> 7)) % 0x7e);
      const int64_t block = fine ? 32 : 128;
      w.view.block_rows = w.view.block_cols = block;
      const size_t s = static_cast<size_t>(((rows + block - 1) / block) * ((cols + block - 1) / block));
      w.scales.resize(s * 4);
      const float scale = 1e-3f;
      for (size_t i = 0; i < s; ++i) std::memcpy(w.scales.data() + 4 * i, &scale, 4);
      break;
    }
    case WeightFormat::kMxfp4:
      w.data.resize(n / 2);
      for (size_t i = 0; i < n / 2; ++i) w.data[i] = static_cast<uint8_t>(i * 37 + (i >> 9));
      w.view.group = fine ? 16 : 32;
      w.scales.assign(static_cast<size_t>(rows * (cols / w.view.group)), 120);
      break;
    case WeightFormat::kInt8:
    case WeightFormat::kInt4: {  // symmetric, group 128 (what `day0 quantize` writes by default) or 32
      w.view.group = fine ? 32 : 128;
      const auto bytes = static_cast<size_t>(rows * w.view.int_row_bytes());
      w.data.resize(bytes);
      for (size_t i = 0; i < bytes; ++i) w.data[i] = static_cast<uint8_t>(i * 37 + (i >> 9));
      const auto groups = static_cast<size_t>(rows * w.view.int_groups());
      const ScaleType int_scales =
          int_scales_or.value_or(format == WeightFormat::kInt4 ? ScaleType::kBF16 : ScaleType::kF32);
      const auto scale_bytes = static_cast<size_t>(scale_type_bytes(int_scales));
      w.view.int_scale_type = int_scales;
      w.scales.resize(groups * scale_bytes);
      const float scale = round_to_bf16(1e-3f);
      const uint16_t scale16 = int_scales == ScaleType::kF16 ? f32_to_f16(scale) : f32_to_bf16(scale);
      for (size_t i = 0; i < groups; ++i) {
        if (int_scales == ScaleType::kF32) {
          std::memcpy(w.scales.data() + 4 * i, &scale, 4);
        } else {
          std::memcpy(w.scales.data() + 2 * i, &scale16, 2);
        }
      }
      break;
    }
  }
  // The allocation starts on a 2 MiB boundary; an offset moves the data past it.
  if (offset % 64 != 0) {
    std::vector<uint8_t, HugePageAllocator<uint8_t>> placed(w.data.size() + offset % 64);
    std::memcpy(placed.data() + offset % 64, w.data.data(), w.data.size());
    w.data = std::move(placed);
  }
  w.view.data = w.data.data() + offset % 64;
  w.view.scales = w.scales.empty() ? nullptr : w.scales.data();
  return w;
}

inline std::vector<float> make_activations(int64_t n, uint64_t seed = 2) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace day0::bench
