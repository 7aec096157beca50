// Portable versions of the inner loops: the scalar dispatch level and the tails of the SIMD ones.
#include <cmath>
#include <cstring>
#include <string>

#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd/weight_rows.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"

namespace day0::cpu {

void prepare_mxfp4_x(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += 32) {
    for (int64_t j = 0; j < 16; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 16 + j] = x[b + 2 * j + 1];
    }
  }
}

namespace {

void dot_rows_scalar(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y) {
  for (int64_t n = n0; n < n1; ++n) y[n - n0] = scalar_row_dot(w, n, x);
}

void dequant_row_scalar(const WeightView& w, int64_t n, int64_t k0, int64_t len, float* out) {
  scalar_dequant_row(w, n, k0, len, out);
}

void gemm_tile_scalar(int64_t mr, int64_t nr, int64_t kc, const float* a, const float* b, float* c,
                      int64_t ldc, bool accumulate) {
  float acc[kMr][kNr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* brow = b + k * kNr;
    for (int64_t i = 0; i < mr; ++i) {
      const float av = a[k * kMr + i];
      for (int64_t j = 0; j < kNr; ++j) acc[i][j] += av * brow[j];
    }
  }
  for (int64_t i = 0; i < mr; ++i) {
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

void axpy_scalar(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale_scalar(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

float exp_sum_scalar(float* s, int64_t n, float shift) {
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += (s[i] = std::exp(s[i] - shift));
  return total;
}

void to_bf16_scalar(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void dot_rows_int_portable(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                           float* y) {
  const int64_t blocks = (w.cols + kIntBlock - 1) / kIntBlock;
  const int64_t per_group = w.int_groups() <= 1 ? blocks : w.group / kIntBlock;
  // Symmetric INT4's zero point (8) inside the integer sum (see SimdKernels::dot_rows_int).
  const int32_t zero = w.format == WeightFormat::kInt4 && w.zeros == nullptr ? 8 : 0;
  for (int64_t n = n0; n < n1; ++n) {
    const auto* row = static_cast<const uint8_t*>(row_ptr(w, n));
    float total = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t dot = 0;
      for (int64_t k = b * kIntBlock; k < (b + 1) * kIntBlock; ++k) {
        dot += (static_cast<int32_t>(int_code(w, row, k)) - zero) * xq[k];
      }
      total += static_cast<float>(dot) * (xs[b] * int_scale(w, n, b / per_group));
    }
    y[n - n0] = total;
  }
}

}  // namespace

const SimdKernels& scalar_kernels() {
  static const SimdKernels k{SimdLevel::kScalar, dot_rows_scalar, dequant_row_scalar,    gemm_tile_scalar,
                             dot_scalar,         axpy_scalar,     scale_scalar,          nullptr,
                             to_bf16_scalar,     exp_sum_scalar,  dot_rows_int_portable, "scalar"};
  return k;
}

void dot_rows_int_scalar(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                         float* y) {
  dot_rows_int_portable(w, n0, n1, xq, xs, y);
}

void pack_int_x_tiles(const int8_t* xq, const float* xs, int64_t rows, int64_t blocks, int8_t* xp,
                      float* xsp) {
  const int64_t tiles = (rows + 15) / 16;
  for (int64_t u = 0; u < tiles; ++u) {
    for (int64_t b = 0; b < blocks; ++b) {
      int8_t* dst = xp + (u * blocks + b) * 512;
      float* sdst = xsp + (u * blocks + b) * 16;
      for (int64_t t = 0; t < 16; ++t) {
        const int64_t r = 16 * u + t;
        if (r >= rows) {
          for (int64_t q = 0; q < 8; ++q) std::memset(dst + q * 64 + t * 4, 0, 4);
          sdst[t] = 0.0f;
          continue;
        }
        const int8_t* src = xq + (r * blocks + b) * kIntBlock;
        for (int64_t q = 0; q < 8; ++q) std::memcpy(dst + q * 64 + t * 4, src + q * 4, 4);
        sdst[t] = xs[r * blocks + b];
      }
    }
  }
}

std::vector<IntDotVariant> int_dot_variants() {
  std::vector<IntDotVariant> out = {{"scalar", dot_rows_int_scalar}};
  const SimdLevel level = detected_simd_level();
  if (level >= SimdLevel::kAvx2) out.push_back({"avx2-maddubs", dot_rows_int_avx2});
  if (cpu_has_avx_vnni()) out.push_back({"avx-vnni", dot_rows_int_avx_vnni});
  if (level >= SimdLevel::kAvx512) out.push_back({"avx512-maddubs", dot_rows_int_avx512_maddubs});
  if (cpu_has_avx512_vnni()) out.push_back({"avx512-vnni", dot_rows_int_avx512_vnni});
  return out;
}

const SimdKernels& kernels_for(SimdLevel level) {
  // A level's table is built by code compiled for that level: asking for one this CPU lacks would stop
  // the process on an illegal instruction, so it is a broken invariant (callers pick from
  // available_simd_levels(), make_backend refuses such a level by name).
  D0_CHECK_MSG(static_cast<int>(level) <= static_cast<int>(detected_simd_level()),
               std::string("SIMD level ") + std::string(simd_level_name(level)) +
                   " asked for on a CPU whose best is " +
                   std::string(simd_level_name(detected_simd_level())));
  switch (level) {
    case SimdLevel::kAmx:
      return amx_kernels();
    case SimdLevel::kAvx512:
      return avx512_kernels();
    case SimdLevel::kAvx2:
      return avx2_kernels();
    case SimdLevel::kScalar:
      break;
  }
  return scalar_kernels();
}

}  // namespace day0::cpu
