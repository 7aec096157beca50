// Backend::matmul_unit against the kernels matmul() really runs, at every SIMD level of this CPU: the
// units that round activations (BF16 dot, AMX BF16, int8 dots) give other floats than the exact call,
// the FP32 ones the same; AMX tiles give other floats than vdpbf16ps where the unit says AMX and the same
// where it says BF16 dot; and no level below amx ever names AMX.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd_level.h"
#include "op_test_support.h"

namespace day0::test {
namespace {

constexpr int64_t kOut = 70, kIn = 300;

std::unique_ptr<Backend> cpu_at(SimdLevel level, std::optional<bool> bf16_dot) {
  BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = level;
  opts.bf16_dot_gemm = bf16_dot;
  return std::move(make_backend("cpu", opts)).value();
}

// y [rows, kOut] of x [rows, kIn] (seeded by rows) times w.
std::vector<float> run_matmul(Backend& be, const TestWeight& w, int64_t rows, bool exact) {
  GuardedMatrix x(rows, kIn);
  x.fill_random(static_cast<uint64_t>(rows));
  GuardedMatrix y(rows, kOut);
  be.matmul({.x = x.cview(), .w = w.view(), .y = y.view(), .exact = exact});
  return y.values();
}

bool rounds_activations(ComputeUnit unit) {
  return unit == ComputeUnit::kBf16Dot || unit == ComputeUnit::kAmxBf16 ||
         unit == ComputeUnit::kInt8Avx512Vnni || unit == ComputeUnit::kInt8Dot ||
         unit == ComputeUnit::kAmxInt8;
}

TEST(MatmulUnit, NamesTheKernelThatRunsAtEveryLevel) {
  const int64_t row_counts[] = {3, 40, 160};  // decode-sized rows, the few-rows route, the GEMM
  int checked = 0;
  for (SimdLevel level : available_simd_levels()) {
    for (std::optional<bool> dot : {std::optional<bool>(true), std::optional<bool>(false)}) {
      auto be = cpu_at(level, dot);
      for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
        const TestWeight w = random_weight(format, kOut, kIn, 7);
        for (int64_t rows : row_counts) {
          const std::string what = std::string(simd_level_name(level)) + (*dot ? "/dot " : "/fma ") +
                                   weight_format_name(format) + " rows " + std::to_string(rows);
          const ComputeUnit unit = be->matmul_unit(format, /*exact=*/false, rows);
          const ComputeUnit exact_unit = be->matmul_unit(format, /*exact=*/true, rows);
          const ComputeUnit float_unit = level == SimdLevel::kScalar ? ComputeUnit::kScalar
                                         : level == SimdLevel::kAvx2 ? ComputeUnit::kFp32FmaAvx2
                                                                     : ComputeUnit::kFp32Fma;
          EXPECT_EQ(exact_unit, float_unit) << what;
          EXPECT_TRUE(level == SimdLevel::kAmx ||
                      (unit != ComputeUnit::kAmxBf16 && unit != ComputeUnit::kAmxInt8))
              << what;
          const std::vector<float> rounded = run_matmul(*be, w, rows, false);
          const std::vector<float> exact = run_matmul(*be, w, rows, true);
          if (rounds_activations(unit)) {
            EXPECT_NE(rounded, exact) << what << ": " << compute_unit_name(unit);
            EXPECT_LT(nmse(rounded, exact), 1e-3) << what;
          } else {
            EXPECT_EQ(rounded, exact) << what << ": " << compute_unit_name(unit);
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(MatmulUnit, AmxTilesWhereTheUnitSaysSoAndVdpbf16psElsewhere) {
  if (!cpu_has_amx_bf16()) GTEST_SKIP() << "no AMX here: the avx512 level is the top one";
  auto amx = cpu_at(SimdLevel::kAmx, true);
  auto dot = cpu_at(SimdLevel::kAvx512, true);
  const TestWeight w = random_weight(WeightFormat::kBF16, kOut, kIn, 9);
  for (int64_t rows : {3, 40, 160}) {
    const ComputeUnit unit = amx->matmul_unit(WeightFormat::kBF16, false, rows);
    ASSERT_EQ(dot->matmul_unit(WeightFormat::kBF16, false, rows), ComputeUnit::kBf16Dot) << rows;
    const std::vector<float> on_amx_level = run_matmul(*amx, w, rows, false);
    const std::vector<float> on_dot = run_matmul(*dot, w, rows, false);
    if (unit == ComputeUnit::kAmxBf16) {
      EXPECT_NE(on_amx_level, on_dot) << rows;  // the tiles add the products in another order
      EXPECT_LT(nmse(on_amx_level, on_dot), 1e-8) << rows;
    } else {
      EXPECT_EQ(unit, ComputeUnit::kBf16Dot) << rows;
      EXPECT_EQ(on_amx_level, on_dot) << rows;  // the same row dots
    }
  }
  EXPECT_EQ(amx->matmul_unit(WeightFormat::kBF16, false, 160), ComputeUnit::kAmxBf16);
}

// INT8 prompts: where the unit says AMX INT8 the amx level gives the scalar level's bits (the tiles'
// sums are the scalar row dots', SimdKernels::gemm_int_amx); where it says INT8 VNNI (decode-sized
// rows) it gives the avx512 level's bits (the same row dots).
TEST(MatmulUnit, AmxInt8TilesWhereTheUnitSaysSo) {
  if (!cpu_has_amx_int8()) GTEST_SKIP() << "no AMX-INT8 here";
  auto amx = cpu_at(SimdLevel::kAmx, true);
  auto avx512 = cpu_at(SimdLevel::kAvx512, true);
  auto scalar = cpu_at(SimdLevel::kScalar, true);
  const TestWeight w = random_weight(WeightFormat::kInt8, kOut, kIn, 11);
  for (int64_t rows : {3, 40, 160}) {
    const ComputeUnit unit = amx->matmul_unit(WeightFormat::kInt8, false, rows);
    const std::vector<float> on_amx_level = run_matmul(*amx, w, rows, false);
    if (unit == ComputeUnit::kAmxInt8) {
      EXPECT_EQ(on_amx_level, run_matmul(*scalar, w, rows, false)) << rows;
    } else {
      EXPECT_EQ(unit, ComputeUnit::kInt8Avx512Vnni) << rows;
      EXPECT_EQ(on_amx_level, run_matmul(*avx512, w, rows, false)) << rows;
    }
  }
  EXPECT_EQ(amx->matmul_unit(WeightFormat::kInt8, false, 160), ComputeUnit::kAmxInt8);
  EXPECT_EQ(amx->matmul_unit(WeightFormat::kInt4, false, 160), ComputeUnit::kAmxInt8);
  EXPECT_EQ(amx->matmul_unit(WeightFormat::kInt8, false, 3), ComputeUnit::kInt8Avx512Vnni);
}

TEST(MatmulUnit, TheResolverAnswersForTheBackendThatRunsTheMatmul) {
  BackendOptions opts;
  opts.quiet = true;
  auto be = open_backend("cpu", opts);
  ASSERT_TRUE(be.is_ok());
  auto raw = make_backend("cpu", opts);
  ASSERT_TRUE(raw.is_ok());
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kInt8}) {
    EXPECT_EQ((*be)->matmul_unit(format, false, 512), (*raw)->matmul_unit(format, false, 512))
        << weight_format_name(format);
  }
  auto reference = open_backend("reference", opts);
  ASSERT_TRUE(reference.is_ok());
  EXPECT_EQ((*reference)->matmul_unit(WeightFormat::kBF16, false, 512), ComputeUnit::kScalar);
}

}  // namespace
}  // namespace day0::test
