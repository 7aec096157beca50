#include "day0/io/dequant.h"

#include <cstring>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"

namespace day0 {

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // tensor data carries no alignment promise
  return v;
}

std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Result<std::vector<float>> tensor_to_f32(const TensorView& t) {
  const uint64_t n = t.numel();
  const int bits = dtype_bits(t.dtype);
  if (bits < 8 || t.data.size() != n * static_cast<uint64_t>(bits / 8)) {
    return unsupported(
        fmt::format("tensor '{}': cannot convert {} to F32 elementwise", t.name, dtype_name(t.dtype)));
  }
  std::vector<float> out(n);
  const uint8_t* p = t.data.data();
  for (uint64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF64:
        out[i] = static_cast<float>(load<double>(p + 8 * i));
        break;
      case DType::kF32:
        out[i] = load<float>(p + 4 * i);
        break;
      case DType::kF16:
        out[i] = f16_to_f32(load<uint16_t>(p + 2 * i));
        break;
      case DType::kBF16:
        out[i] = bf16_to_f32(load<uint16_t>(p + 2 * i));
        break;
      case DType::kF8E4M3:
        out[i] = f8e4m3_to_f32(p[i]);
        break;
      case DType::kF8E5M2:
        out[i] = f8e5m2_to_f32(p[i]);
        break;
      case DType::kF8E8M0:
        out[i] = e8m0_to_f32(p[i]);
        break;
      case DType::kI64:
        out[i] = static_cast<float>(load<int64_t>(p + 8 * i));
        break;
      case DType::kI32:
        out[i] = static_cast<float>(load<int32_t>(p + 4 * i));
        break;
      case DType::kI16:
        out[i] = static_cast<float>(load<int16_t>(p + 2 * i));
        break;
      case DType::kI8:
        out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
        break;
      case DType::kU64:
        out[i] = static_cast<float>(load<uint64_t>(p + 8 * i));
        break;
      case DType::kU32:
        out[i] = static_cast<float>(load<uint32_t>(p + 4 * i));
        break;
      case DType::kU16:
        out[i] = static_cast<float>(load<uint16_t>(p + 2 * i));
        break;
      case DType::kU8:
        out[i] = static_cast<float>(p[i]);
        break;
      case DType::kBool:
        out[i] = p[i] != 0 ? 1.0f : 0.0f;
        break;
      case DType::kF4:
        return unsupported("F4 has no elementwise byte layout");
    }
  }
  return out;
}

std::vector<uint16_t> f32_to_bf16_vector(std::span<const float> values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = f32_to_bf16(values[i]);
  return out;
}

Result<std::vector<uint16_t>> tensor_to_bf16(const TensorView& t) {
  if (t.dtype == DType::kBF16) {
    std::vector<uint16_t> out(t.numel());
    if (!out.empty()) std::memcpy(out.data(), t.data.data(), out.size() * 2);
    return out;
  }
  D0_ASSIGN_OR_RETURN(auto f32, tensor_to_f32(t));
  return f32_to_bf16_vector(f32);
}

void dequant_fp8_block(std::span<const uint8_t> weight, int64_t rows, int64_t cols,
                       std::span<const float> scale, int64_t block_rows, int64_t block_cols,
                       std::span<float> out) {
  D0_CHECK(rows >= 0 && cols >= 0 && block_rows > 0 && block_cols > 0);
  const int64_t s_cols = ceil_div(cols, block_cols);
  D0_CHECK(static_cast<int64_t>(weight.size()) == rows * cols &&
           static_cast<int64_t>(out.size()) == rows * cols);
  D0_CHECK(static_cast<int64_t>(scale.size()) == ceil_div(rows, block_rows) * s_cols);
  // Decoding through a 256-entry table keeps the inner loop a lookup and a multiply.
  float table[256];
  for (int b = 0; b < 256; ++b) table[b] = f8e4m3_to_f32(static_cast<uint8_t>(b));
  for (int64_t i = 0; i < rows; ++i) {
    const float* s_row = scale.data() + (i / block_rows) * s_cols;
    const uint8_t* w_row = weight.data() + i * cols;
    float* o_row = out.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) o_row[j] = table[w_row[j]] * s_row[j / block_cols];
  }
}

Result<std::vector<float>> dequant_fp8_block(const TensorView& weight, const TensorView& scale_inv,
                                             int64_t block_rows, int64_t block_cols) {
  if (weight.dtype != DType::kF8E4M3 || weight.shape.size() != 2) {
    return invalid_argument(fmt::format("tensor '{}': expected a 2-D F8_E4M3 weight, found {} {}",
                                        weight.name, dtype_name(weight.dtype), shape_string(weight.shape)));
  }
  if (block_rows <= 0 || block_cols <= 0) return invalid_argument("FP8 block size must be positive");
  const int64_t rows = weight.shape[0];
  const int64_t cols = weight.shape[1];
  const std::vector<int64_t> expected{ceil_div(rows, block_rows), ceil_div(cols, block_cols)};
  const bool exponent_bytes = scale_inv.dtype == DType::kF8E8M0 || scale_inv.dtype == DType::kU8;
  if ((scale_inv.dtype != DType::kF32 && scale_inv.dtype != DType::kBF16 && !exponent_bytes) ||
      !std::equal(scale_inv.shape.begin(), scale_inv.shape.end(), expected.begin(), expected.end())) {
    return invalid_argument(
        fmt::format("tensor '{}': scale for {} with {}x{} blocks must be F32 or E8M0 {}, found {} {}",
                    scale_inv.name, shape_string(weight.shape), block_rows, block_cols,
                    shape_string(expected), dtype_name(scale_inv.dtype), shape_string(scale_inv.shape)));
  }
  std::vector<float> scale;
  if (exponent_bytes) {  // ue8m0: 2^(u - 127), 0xFF NaN (U8 from writers without an E8M0 dtype)
    scale.resize(scale_inv.data.size());
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = e8m0_to_f32(scale_inv.data[i]);
  } else {
    D0_ASSIGN_OR_RETURN(scale, tensor_to_f32(scale_inv));
  }
  std::vector<float> out(weight.numel());
  dequant_fp8_block(weight.data, rows, cols, scale, block_rows, block_cols, out);
  return out;
}

void dequant_fp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales, int64_t group,
                 std::span<float> out) {
  D0_CHECK(group == 16 || group == 32);
  const auto g_size = static_cast<size_t>(group);
  D0_CHECK(packed.size() * 2 == scales.size() * g_size && out.size() == scales.size() * g_size);
  for (size_t g = 0; g < scales.size(); ++g) {
    const int exponent = static_cast<int>(scales[g]) - 127;
    const bool nan_scale = scales[g] == 255;
    for (size_t j = 0; j < g_size / 2; ++j) {
      const uint8_t byte = packed[g * g_size / 2 + j];
      const float lo = fp4_e2m1_to_f32(byte & 0x0f);
      const float hi = fp4_e2m1_to_f32(byte >> 4);
      out[g * g_size + 2 * j] = nan_scale ? NAN : std::ldexp(lo, exponent);
      out[g * g_size + 2 * j + 1] = nan_scale ? NAN : std::ldexp(hi, exponent);
    }
  }
}

void dequant_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, std::span<float> out) {
  dequant_fp4(blocks, scales, 32, out);
}

Result<std::vector<float>> dequant_fp4(const TensorView& weight, const TensorView& scales) {
  const bool weight_ok =
      (weight.dtype == DType::kI8 || weight.dtype == DType::kU8) && weight.shape.size() == 2;
  const int64_t rows = weight_ok ? weight.shape[0] : 0, cols = weight_ok ? 2 * weight.shape[1] : 0;
  const bool scales_ok = (scales.dtype == DType::kU8 || scales.dtype == DType::kF8E8M0) &&
                         scales.shape.size() == 2 && scales.shape[0] == rows && scales.shape[1] > 0 &&
                         (scales.shape[1] * 32 == cols || scales.shape[1] * 16 == cols);
  if (!weight_ok || !scales_ok) {
    return invalid_argument(fmt::format(
        "FP4 '{}' / '{}': expected I8 (or U8) nibbles [rows, cols / 2] and E8M0 scales [rows, cols / 32 or "
        "cols / 16], found {} {} and {} {}",
        weight.name, scales.name, dtype_name(weight.dtype), shape_string(weight.shape),
        dtype_name(scales.dtype), shape_string(scales.shape)));
  }
  std::vector<float> out(static_cast<size_t>(rows * cols));  // [rows, cols]
  dequant_fp4(weight.data, scales.data, cols / scales.shape[1], out);
  return out;
}

float nvfp4_global_multiplier(float stored, Nvfp4GlobalScale convention) {
  return convention == Nvfp4GlobalScale::kDivisor ? 1.0f / stored : stored;
}

void dequant_nvfp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales, float global_multiplier,
                   std::span<float> out) {
  D0_CHECK(packed.size() * 2 == scales.size() * 16 && out.size() == scales.size() * 16);
  for (size_t g = 0; g < scales.size(); ++g) {
    const float scale = f8e4m3_to_f32(scales[g]) * global_multiplier;  // rounded once, as WeightView::at
    for (size_t j = 0; j < 8; ++j) {
      const uint8_t byte = packed[g * 8 + j];
      out[g * 16 + 2 * j] = fp4_e2m1_to_f32(byte & 0x0f) * scale;
      out[g * 16 + 2 * j + 1] = fp4_e2m1_to_f32(byte >> 4) * scale;
    }
  }
}

Result<std::vector<float>> dequant_nvfp4(const TensorView& weight, const TensorView& scales,
                                         float global_multiplier) {
  const bool weight_ok =
      (weight.dtype == DType::kU8 || weight.dtype == DType::kI8) && weight.shape.size() == 2;
  const int64_t rows = weight_ok ? weight.shape[0] : 0, cols = weight_ok ? 2 * weight.shape[1] : 0;
  const bool scales_ok = scales.dtype == DType::kF8E4M3 && scales.shape.size() == 2 &&
                         scales.shape[0] == rows && scales.shape[1] * 16 == cols;
  if (!weight_ok || !scales_ok) {
    return invalid_argument(fmt::format(
        "NVFP4 '{}' / '{}': expected U8 nibbles [rows, cols / 2] and F8_E4M3 scales [rows, cols / 16], found "
        "{} {} and {} {}",
        weight.name, scales.name, dtype_name(weight.dtype), shape_string(weight.shape),
        dtype_name(scales.dtype), shape_string(scales.shape)));
  }
  std::vector<float> out(static_cast<size_t>(rows * cols));  // [rows, cols]
  dequant_nvfp4(weight.data, scales.data, global_multiplier, out);
  return out;
}

std::vector<int64_t> mxfp4_dequant_shape(std::span<const int64_t> blocks_shape) {
  if (blocks_shape.size() < 2) return {};
  std::vector<int64_t> shape(blocks_shape.begin(), blocks_shape.end() - 2);
  shape.push_back(blocks_shape[blocks_shape.size() - 2] * 32);
  return shape;
}

Result<std::vector<float>> dequant_mxfp4(const TensorView& blocks, const TensorView& scales) {
  const bool blocks_ok = blocks.dtype == DType::kU8 && blocks.shape.size() >= 2 && blocks.shape.back() == 16;
  const bool scales_ok = (scales.dtype == DType::kU8 || scales.dtype == DType::kF8E8M0) &&
                         scales.shape.size() + 1 == blocks.shape.size() &&
                         std::equal(scales.shape.begin(), scales.shape.end(), blocks.shape.begin());
  if (!blocks_ok || !scales_ok) {
    return invalid_argument(fmt::format(
        "MXFP4 '{}' / '{}': expected U8 blocks [..., G, 16] and U8 scales [..., G], found {} {} and {} {}",
        blocks.name, scales.name, dtype_name(blocks.dtype), shape_string(blocks.shape),
        dtype_name(scales.dtype), shape_string(scales.shape)));
  }
  const auto n = checked_mul(scales.numel(), uint64_t{32});
  if (!n) return out_of_range("MXFP4 tensor too large");
  std::vector<float> out(*n);
  dequant_mxfp4(blocks.data, scales.data, out);
  return out;
}

}  // namespace day0
