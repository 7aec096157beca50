#include "day0/quant/pack_quantized.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "day0/core/error.h"
#include "day0/core/numeric.h"

namespace day0 {

int pack_factor(int bits) {
  D0_CHECK(bits == 4 || bits == 8);
  return 32 / bits;
}

int quant_min(int bits) {
  return -(1 << (bits - 1));
}

int quant_max(int bits) {
  return (1 << (bits - 1)) - 1;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The unsigned code of a signed value: q + 2^(bits-1), in [0, 2^bits).
uint32_t to_code(int8_t value, int bits) {
  D0_CHECK(value >= quant_min(bits) && value <= quant_max(bits));
  return static_cast<uint32_t>(value + (1 << (bits - 1)));
}

int8_t from_code(uint32_t word, int shift, int bits) {
  const uint32_t mask = (1u << bits) - 1u;
  return static_cast<int8_t>(static_cast<int>((word >> shift) & mask) - (1 << (bits - 1)));
}

}  // namespace

std::vector<int32_t> pack_rows(std::span<const int8_t> values, int64_t rows, int64_t cols, int bits) {
  const int f = pack_factor(bits);
  D0_CHECK(values.size() == static_cast<size_t>(rows * cols));
  const int64_t words = ceil_div(cols, f);
  std::vector<int32_t> out(static_cast<size_t>(rows * words), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t code = to_code(values[static_cast<size_t>(r * cols + c)], bits);
      auto& word = out[static_cast<size_t>(r * words + c / f)];
      word = static_cast<int32_t>(static_cast<uint32_t>(word) | (code << (bits * (c % f))));
    }
  }
  return out;
}

std::vector<int8_t> unpack_rows(std::span<const int32_t> packed, int64_t rows, int64_t cols, int bits) {
  const int f = pack_factor(bits);
  const int64_t words = ceil_div(cols, f);
  D0_CHECK(packed.size() == static_cast<size_t>(rows * words));
  std::vector<int8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const auto word = static_cast<uint32_t>(packed[static_cast<size_t>(r * words + c / f)]);
      out[static_cast<size_t>(r * cols + c)] = from_code(word, static_cast<int>(bits * (c % f)), bits);
    }
  }
  return out;
}

std::vector<int32_t> pack_columns(std::span<const int8_t> values, int64_t rows, int64_t cols, int bits) {
  const int f = pack_factor(bits);
  D0_CHECK(values.size() == static_cast<size_t>(rows * cols));
  std::vector<int32_t> out(static_cast<size_t>(ceil_div(rows, f) * cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t code = to_code(values[static_cast<size_t>(r * cols + c)], bits);
      auto& word = out[static_cast<size_t>((r / f) * cols + c)];
      word = static_cast<int32_t>(static_cast<uint32_t>(word) | (code << (bits * (r % f))));
    }
  }
  return out;
}

std::vector<int8_t> unpack_columns(std::span<const int32_t> packed, int64_t rows, int64_t cols, int bits) {
  const int f = pack_factor(bits);
  D0_CHECK(packed.size() == static_cast<size_t>(ceil_div(rows, f) * cols));
  std::vector<int8_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const auto word = static_cast<uint32_t>(packed[static_cast<size_t>((r / f) * cols + c)]);
      out[static_cast<size_t>(r * cols + c)] = from_code(word, static_cast<int>(bits * (r % f)), bits);
    }
  }
  return out;
}

float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(value));
    case DType::kF16:
      return f16_to_f32(f32_to_f16(value));
    default:
      return value;
  }
}

namespace {

// The scale of a symmetric group. amax / qmax leaves the code qmin (-8 of int4's [-8, 7]) unused; a
// finer step amax / d, d in [qmax, qmax + 1], may clip the extreme by up to one step and still lower
// the group's error everywhere else (a group whose extreme is negative reaches -8 exactly with d =
// qmax + 1, as llama.cpp's Q4_0 does). Nine candidates, each judged with the scale as stored (rounded
// to its dtype); the least squared error wins, ties going to the larger scale. 0 when none is usable.
float symmetric_scale(const float* x, int64_t n, float amax, int qmin, int qmax, DType dtype) {
  float best = 0.0f;
  double best_error = std::numeric_limits<double>::infinity();
  for (int k = 0; k <= 8; ++k) {
    const float scale =
        round_to_dtype(amax / (static_cast<float>(qmax) + static_cast<float>(k) / 8.0f), dtype);
    if (!(scale > 0.0f) || !std::isfinite(scale)) continue;
    double error = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float q =
          std::clamp(std::nearbyint(x[j] / scale), static_cast<float>(qmin), static_cast<float>(qmax));
      const double d = static_cast<double>(x[j]) - static_cast<double>(q) * static_cast<double>(scale);
      error += d * d;
    }
    if (error < best_error) {
      best_error = error;
      best = scale;
    }
  }
  return best;
}

}  // namespace

GroupQuantized quantize_groups(std::span<const float> weight, int64_t rows, int64_t cols,
                               const PackArgs& args) {
  D0_CHECK(args.group_size > 0 && cols % args.group_size == 0);
  D0_CHECK(weight.size() == static_cast<size_t>(rows * cols));
  const int qmin = quant_min(args.bits), qmax = quant_max(args.bits);
  const int64_t groups = cols / args.group_size;
  GroupQuantized out;
  out.q.resize(weight.size());
  out.scale.resize(static_cast<size_t>(rows * groups));
  if (!args.symmetric) out.zero_point.resize(out.scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = weight.data() + r * cols + g * args.group_size;
      // Zero is always representable: the range is widened to include it.
      float lo = 0.0f, hi = 0.0f;
      for (int64_t j = 0; j < args.group_size; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
      }
      float scale = args.symmetric
                        ? symmetric_scale(x, args.group_size, std::max(-lo, hi), qmin, qmax, args.scale_dtype)
                        : round_to_dtype((hi - lo) / static_cast<float>(qmax - qmin), args.scale_dtype);
      // An all-zero group (or one whose scale underflows the storage dtype) quantizes to zeros.
      if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
      int zp = 0;
      if (!args.symmetric) {
        zp = static_cast<int>(std::clamp(std::nearbyint(static_cast<float>(qmin) - lo / scale),
                                         static_cast<float>(qmin), static_cast<float>(qmax)));
        out.zero_point[static_cast<size_t>(r * groups + g)] = static_cast<int8_t>(zp);
      }
      out.scale[static_cast<size_t>(r * groups + g)] = scale;
      int8_t* q = out.q.data() + r * cols + g * args.group_size;
      for (int64_t j = 0; j < args.group_size; ++j) {
        const float v = std::nearbyint(x[j] / scale) + static_cast<float>(zp);
        q[j] = static_cast<int8_t>(std::clamp(v, static_cast<float>(qmin), static_cast<float>(qmax)));
      }
    }
  }
  return out;
}

void dequantize_groups(std::span<const int8_t> q, int64_t rows, int64_t cols, std::span<const float> scale,
                       std::span<const int8_t> zero_point, int64_t group_size, std::span<float> out) {
  D0_CHECK(group_size > 0 && cols % group_size == 0);
  const int64_t groups = cols / group_size;
  D0_CHECK(q.size() == static_cast<size_t>(rows * cols) && out.size() == q.size());
  D0_CHECK(scale.size() == static_cast<size_t>(rows * groups));
  D0_CHECK(zero_point.empty() || zero_point.size() == scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t g = static_cast<size_t>(r * groups + c / group_size);
      const int zp = zero_point.empty() ? 0 : zero_point[g];
      const size_t i = static_cast<size_t>(r * cols + c);
      out[i] = static_cast<float>(q[i] - zp) * scale[g];
    }
  }
}

}  // namespace day0
