// INT8 / INT4 weights against int8 activations (the non-exact matmul of integer weights): the activation
// quantizer on hand-worked blocks, every build of the integer row dot this CPU has against the scalar
// one, every SIMD level of the cpu backend against the reference backend on the edge cases, and the
// result against the float matmul within the bound the activation quantization allows.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/core/numeric.h"
#include "day0/ops/int8_activations.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

TEST(Int8Activations, HandWorkedBlocks) {
  // Block 0: amax 1.27 -> scale 0.01; 0.005 is exactly half a step (rounds to even: 0); -1.27 is -127,
  // never -128. Block 1 (columns 32..39, the padded tail): all zero -> scale 0, codes 0.
  std::vector<float> x(40, 0.0f);
  x[0] = 1.27f;
  x[1] = -1.27f;
  x[2] = 0.5f;
  x[3] = -0.016f;
  std::vector<int8_t> q(64, 99);
  std::vector<float> scale(2, -1.0f);
  std::vector<int32_t> sum(2, -1);
  quantize_activation_row(x.data(), 40, q.data(), scale.data(), sum.data());
  EXPECT_FLOAT_EQ(scale[0], 1.27f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 50);
  EXPECT_EQ(q[3], -2);  // -1.6 rounds to -2
  EXPECT_EQ(sum[0], 127 - 127 + 50 - 2);
  EXPECT_EQ(scale[1], 0.0f);
  EXPECT_EQ(sum[1], 0);
  for (int k = 40; k < 64; ++k) EXPECT_EQ(q[static_cast<size_t>(k)], 0) << "padding " << k;
  // A NaN in a block makes its scale NaN (the output must not hide it).
  x[5] = NAN;
  quantize_activation_row(x.data(), 40, q.data(), scale.data(), sum.data());
  EXPECT_TRUE(std::isnan(scale[0]));
  EXPECT_EQ(scale[1], 0.0f);
}

// Every level's quantize_int8_row against the one quantizer (ops/int8_activations.h), every code, scale
// and sum equal: widths past and short of whole blocks, a block at exactly half steps (ties to even), a
// zero block, blocks holding an infinity or a NaN, -0.0, and values whose product with 127 / amax lands
// just past 127.
TEST(Int8Activations, EverySimdLevelQuantizesAsTheSharedQuantizer) {
  int levels = 0;
  uint64_t seed = 40;
  for (SimdLevel level : available_simd_levels()) {
    const auto quantize = cpu::kernels_for(level).quantize_int8_row;
    if (quantize == nullptr) continue;
    ++levels;
    for (int64_t n :
         {int64_t{1}, int64_t{17}, int64_t{32}, int64_t{40}, int64_t{64}, int64_t{200}, int64_t{576}}) {
      std::vector<float> x = random_vector(n, ++seed, 3.0f);
      if (n >= 32) {
        for (int64_t k = 0; k < 32; ++k) x[static_cast<size_t>(k)] = 0.5f * static_cast<float>(k - 16);
        x[0] = 127.0f;  // amax 127: scale 1, codes k - 16 halved: ties at every odd k
      }
      if (n >= 64) {
        for (int64_t k = 32; k < 64; ++k) x[static_cast<size_t>(k)] = k % 2 ? 0.0f : -0.0f;
      }
      if (n >= 200) {
        x[70] = INFINITY;
        x[101] = NAN;
        x[130] = -3.3333333f;  // amax of its block: 127 / amax times itself rounds past 127 or not
        x[131] = 3.3333333f;
      }
      const int64_t blocks = (n + kIntBlock - 1) / kIntBlock;
      std::vector<int8_t> want_q(static_cast<size_t>(blocks * kIntBlock), 99), got_q(want_q);
      std::vector<float> want_s(static_cast<size_t>(blocks), -1.0f), got_s(want_s);
      std::vector<int32_t> want_sum(static_cast<size_t>(blocks), -1), got_sum(want_sum);
      quantize_activation_row(x.data(), n, want_q.data(), want_s.data(), want_sum.data());
      quantize(x.data(), n, got_q.data(), got_s.data(), got_sum.data());
      const std::string where = fmt::format("{} n={}", simd_level_name(level), n);
      EXPECT_EQ(got_q, want_q) << where;
      EXPECT_EQ(got_sum, want_sum) << where;
      ASSERT_EQ(std::memcmp(got_s.data(), want_s.data(), got_s.size() * sizeof(float)), 0) << where;
    }
  }
  if (levels == 0) GTEST_SKIP() << "no level here has its own activation quantizer";
}

// Weights with edge cases planted: a row of -128 codes (INT8 saturation of |c|), a group whose scale
// is 0, INT4 codes 0 and 15.
TestWeight edge_weight(WeightFormat format, int64_t rows, int64_t cols, int64_t group, bool asym,
                       uint64_t seed) {
  TestWeight w = random_int_weight(format, rows, cols, group, asym, seed);
  const WeightView v = w.view();
  const int64_t row_bytes = v.int_row_bytes();
  for (int64_t k = 0; k < cols; ++k) {
    if (format == WeightFormat::kInt8) {
      w.data[static_cast<size_t>(k)] = 0x80;  // row 0: -128 everywhere
    } else {
      uint8_t& b = w.data[static_cast<size_t>((k / kIntBlock) * 16 + k % 16)];
      b = k % kIntBlock < 16 ? static_cast<uint8_t>((b & 0xf0) | (k % 2 ? 15 : 0))
                             : static_cast<uint8_t>((b & 0x0f) | ((k % 2 ? 15 : 0) << 4));
    }
  }
  if (rows > 1) {  // row 1, group 0: scale 0
    const float zero = 0.0f;
    std::memcpy(w.scales.data() + static_cast<size_t>(v.int_groups()) * 4, &zero, 4);
  }
  (void)row_bytes;
  return w;
}

struct IntCase {
  int64_t t, k, n, group;
};
// K not a multiple of 32 (one group per row then), block counts not a multiple of two or four (the
// 512-bit steps take two INT8 or four INT4 blocks; 448 columns: four-block steps across groups of 64
// and two tail blocks), odd N (the 4-row step's tail), group boundaries at 32 / 64 / 128, T = 1..4
// (decode) and T > 4 (prefill, with a partial token tile).
constexpr IntCase kIntCases[] = {{1, 37, 5, 37},   {1, 32, 7, 32},    {2, 96, 33, 32},    {3, 100, 9, 100},
                                 {4, 256, 64, 64}, {5, 160, 31, 32},  {17, 384, 13, 128}, {1, 544, 40, 32},
                                 {7, 1, 3, 1},     {20, 64, 129, 64}, {1, 4096, 12, 128}, {2, 448, 9, 64},
                                 {2, 288, 9, 96}};

// Activations with an all-zero block and a block holding one large value among small ones.
GuardedMatrix edge_activations(int64_t t, int64_t k, uint64_t seed) {
  GuardedMatrix x(t, k);
  x.fill_random(seed);
  Matrix v = x.view();
  for (int64_t r = 0; r < t; ++r) {
    if (k > 32) {
      for (int64_t c = 32; c < std::min<int64_t>(64, k); ++c) v.row(r)[c] = 0.0f;
    }
    v.row(r)[0] = r % 2 ? -40.0f : 40.0f;
  }
  return x;
}

TEST(IntMatmul, EverySimdLevelMatchesTheReferenceOnEdgeCases) {
  Differential diff;
  uint64_t seed = 100;
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    for (const IntCase& c : kIntCases) {
      for (bool asym : {false, true}) {
        const TestWeight w = edge_weight(format, c.n, c.k, c.group, asym, ++seed);
        const GuardedMatrix x = edge_activations(c.t, c.k, ++seed);
        const auto bias = random_vector(c.n, ++seed);
        for (int variant = 0; variant < 2; ++variant) {  // plain, + bias and accumulate
          const std::string name =
              fmt::format("{} T={} K={} N={} g{}{}{}", weight_format_name(format), c.t, c.k, c.n, c.group,
                          asym ? " asym" : "", variant ? " +bias acc" : "");
          // Same int8 codes on both sides (one quantizer): only float32 vs double accumulation differs.
          diff.check("matmul", name, c.t, c.n, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
            if (variant == 1) out.fill_random(7);
            be.matmul({.x = x.cview(),
                       .w = w.view(),
                       .bias = variant ? bias.data() : nullptr,
                       .y = out.view(),
                       .accumulate = variant == 1,
                       .exact = false});
          });
        }
      }
    }
  }
  diff.finish();
}

// got[n - 1] against the scalar row dots' want[n] for rows [1, n): builds that sum the same exact block
// dots in other orders differ by the float32 rounding of the blocks' running sum, bounded by the sum of
// the terms' magnitudes (|w| |x| per column, a little above |dot| |scales| per block), which cancellation
// can make far larger than |ref|.
void expect_row_dots_near(const std::vector<float>& got, const std::vector<float>& want, const TestWeight& w,
                          const GuardedMatrix& x, const IntCase& c, const std::string& label) {
  EXPECT_EQ(got[static_cast<size_t>(c.n - 1)], -7.0f) << label << ": wrote past n1 - n0 outputs";
  for (int64_t n = 1; n < c.n; ++n) {
    const float ref = want[static_cast<size_t>(n)];
    double magnitude = 0.0;
    for (int64_t k = 0; k < c.k; ++k)
      magnitude += std::fabs(static_cast<double>(w.view().at(n, k)) * x.cview().row(0)[k]);
    const double blocks = static_cast<double>((c.k + kIntBlock - 1) / kIntBlock);
    const double bound = 1e-5 * (1.0 + std::fabs(ref)) + 2.0 * blocks * 0x1p-23 * 1.01 * magnitude;
    EXPECT_NEAR(got[static_cast<size_t>(n - 1)], ref, bound) << label << " row " << n;
  }
}

TEST(IntMatmul, EveryIntegerDotBuildMatchesScalar) {
  const auto variants = cpu::int_dot_variants();
  ASSERT_FALSE(variants.empty());
  std::printf("integer dot builds on this CPU:");
  for (const auto& v : variants) std::printf(" %s", v.name);
  std::printf("\n");
  uint64_t seed = 500;
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    for (const IntCase& c : kIntCases) {
      const TestWeight w = edge_weight(format, c.n, c.k, c.group, false, ++seed);
      const GuardedMatrix x = edge_activations(1, c.k, ++seed);
      Int8Rows xq;
      quantize_activations(x.cview(), xq);
      std::vector<float> want(static_cast<size_t>(c.n));
      cpu::dot_rows_int_scalar(w.view(), 0, c.n, xq.codes(0), xq.scales(0), want.data());
      // Each level's prepared row dots (SimdKernels::prepare_int_x), where it has them for this format.
      std::vector<std::vector<uint8_t>> prepared_x;
      for (SimdLevel level : available_simd_levels()) {
        const cpu::SimdKernels& k = cpu::kernels_for(level);
        if (k.prepare_int_x == nullptr) continue;
        std::vector<uint8_t>& buffer = prepared_x.emplace_back(cpu::int_x_prepared_bytes(c.k) + 32);
        uint8_t* aligned = buffer.data() + (32 - reinterpret_cast<uintptr_t>(buffer.data()) % 32) % 32;
        if (!k.prepare_int_x(w.view(), xq.codes(0), xq.scales(0), aligned)) continue;
        std::vector<float> got(static_cast<size_t>(c.n) + 1, -7.0f);
        k.dot_rows_int_prepared(w.view(), 1, c.n, aligned, xq.codes(0), xq.scales(0), got.data());
        expect_row_dots_near(got, want, w, x, c,
                             fmt::format("{} prepared {} K={} g{}", simd_level_name(level),
                                         weight_format_name(format), c.k, c.group));
      }
      for (const auto& v : variants) {
        // Rows [1, n): an offset start exercises the row pointer arithmetic.
        std::vector<float> got(static_cast<size_t>(c.n) + 1, -7.0f);
        v.fn(w.view(), 1, c.n, xq.codes(0), xq.scales(0), got.data());
        expect_row_dots_near(got, want, w, x, c,
                             fmt::format("{} {} K={} g{}", v.name, weight_format_name(format), c.k, c.group));
      }
    }
  }
}

// The prompt paths of every level that has one (AMX-INT8 tiles, SimdKernels::gemm_int_amx; the 256-bit
// panels, SimdKernels::gemm_int) against the scalar row dots: the block dots are exact integers and the
// float sums run in the same order, so every bit must match. T = 5..33 (token tiles of 16 and partial
// ones), K not a multiple of 64 or of 32, N past an 8-, 16- and 32-row tile, groups of 32 / 64 / 128 / the
// whole row, zero points, bias and accumulate.
TEST(IntMatmul, PromptTilesEqualTheScalarRowDotsBitForBit) {
  BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = SimdLevel::kScalar;
  auto scalar = make_backend("cpu", opts).value();
  std::vector<std::pair<SimdLevel, std::unique_ptr<Backend>>> tiled;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    if (k.gemm_int == nullptr && k.gemm_int_amx == nullptr) continue;
    opts.simd = level;
    tiled.emplace_back(level, make_backend("cpu", opts).value());
  }
  if (tiled.empty()) GTEST_SKIP() << "no level of this CPU has prompt tiles for integer weights";
  std::vector<IntCase> cases;
  // From 5 tokens on (kGemvMaxRows + 1): fewer run the row dots of the avx512 level, tested above.
  for (int64_t t = 5; t <= 33; ++t) cases.push_back({t, 100, 33, 100});
  for (const IntCase& c :
       {IntCase{17, 544, 40, 32}, IntCase{20, 64, 129, 64}, IntCase{33, 4096, 12, 128}, IntCase{7, 1, 3, 1},
        IntCase{16, 160, 31, 32}, IntCase{32, 96, 64, 32}, IntCase{24, 384, 48, 128}})
    cases.push_back(c);
  uint64_t seed = 1300;
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    for (const IntCase& c : cases) {
      const bool asym = c.t % 2 == 0;
      const TestWeight w = edge_weight(format, c.n, c.k, c.group, asym, ++seed);
      const GuardedMatrix x = edge_activations(c.t, c.k, ++seed);
      const auto bias = random_vector(c.n, ++seed);
      const bool extras = c.t % 3 == 0;  // + bias, accumulate
      const auto run = [&](Backend& be, GuardedMatrix& out) {
        out.fill_random(11);
        be.matmul({.x = x.cview(),
                   .w = w.view(),
                   .bias = extras ? bias.data() : nullptr,
                   .y = out.view(),
                   .accumulate = extras,
                   .exact = false});
      };
      GuardedMatrix want(c.t, c.n);
      run(*scalar, want);
      const auto a = want.values();
      for (auto& [level, be] : tiled) {
        GuardedMatrix got(c.t, c.n);
        run(*be, got);
        const auto b = got.values();
        ASSERT_EQ(a.size(), b.size());
        int64_t differ = 0;
        for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0) << simd_level_name(level) << " " << weight_format_name(format) << " T=" << c.t
                             << " K=" << c.k << " N=" << c.n << " g" << c.group << (asym ? " asym" : "")
                             << ": first " << a[0] << " vs " << b[0];
      }
    }
  }
}

// The weight with every scale rounded to a value `type` holds, twice: as float32 (`wide`) and as the
// `type` bits themselves (`narrow`, WeightView::int_scale_type), the two ways one checkpoint's scales
// can be held in memory.
struct ScaleTwins {
  TestWeight wide, narrow;
};
ScaleTwins scale_twins(const TestWeight& w, ScaleType type) {
  ScaleTwins t{w, w};
  const size_t n = w.scales.size() / 4;
  t.narrow.scales.resize(2 * n);
  t.narrow.int_scale_type = type;
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, w.scales.data() + 4 * i, 4);
    const uint16_t bits = type == ScaleType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    const float held = type == ScaleType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    std::memcpy(t.wide.scales.data() + 4 * i, &held, 4);
    std::memcpy(t.narrow.scales.data() + 2 * i, &bits, 2);
  }
  return t;
}

int64_t differing_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::max(a.size(), b.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return differ;
}

// BF16 / F16 scales kept as they are must give every kernel the float32 values it had before: on the
// reference and every cpu level, decode (the row dots, the prepared INT4 dots), prompts (the 256-bit
// panels, the AMX tiles), row-invariant calls and exact ones, zero points or not, the narrow copy's
// results equal the float32 copy's bit for bit. A kernel reading the 16-bit scales as float32 (or with
// float32's stride) gives other values.
TEST(IntMatmul, NarrowScalesGiveTheBitsOfTheirFloat32Copy) {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> backends;
  backends.emplace_back("reference", reference_backend());
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions opts;
    opts.n_threads = 2;
    opts.simd = level;
    backends.emplace_back(simd_level_name(level), make_backend("cpu", opts).value());
  }
  std::vector<IntCase> cases(std::begin(kIntCases), std::end(kIntCases));
  for (const IntCase& c : {IntCase{17, 544, 40, 32}, IntCase{33, 4096, 12, 128}, IntCase{24, 384, 48, 128},
                           IntCase{16, 160, 31, 32}})
    cases.push_back(c);
  uint64_t seed = 2100;
  int64_t compared = 0;
  for (ScaleType type : {ScaleType::kBF16, ScaleType::kF16}) {
    for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
      for (const IntCase& c : cases) {
        for (bool asym : {false, true}) {
          const ScaleTwins w = scale_twins(edge_weight(format, c.n, c.k, c.group, asym, ++seed), type);
          ASSERT_EQ(
              w.narrow.view().scale_bytes() + static_cast<uint64_t>(2 * w.narrow.view().int_groups() * c.n),
              w.wide.view().scale_bytes())
              << "a 16-bit scale is 2 bytes";
          const GuardedMatrix x = edge_activations(c.t, c.k, ++seed);
          for (auto& [name, be] : backends) {
            for (int mode = 0; mode < 3; ++mode) {  // int8 activations, row-invariant, exact
              const auto run = [&](const TestWeight& tw) {
                GuardedMatrix y(c.t, c.n);
                be->matmul({.x = x.cview(),
                            .w = tw.view(),
                            .y = y.view(),
                            .exact = mode == 2,
                            .row_invariant = mode == 1});
                return y.values();
              };
              const auto want = run(w.wide);
              const auto got = run(w.narrow);
              EXPECT_EQ(differing_floats(got, want), 0)
                  << name << (type == ScaleType::kBF16 ? " BF16" : " F16") << " scales "
                  << weight_format_name(format) << " T=" << c.t << " K=" << c.k << " N=" << c.n << " g"
                  << c.group << (asym ? " asym" : "") << " mode " << mode;
              ++compared;
            }
          }
          // Each integer dot build and each level's prepared dots, called directly on one token.
          Int8Rows xq;
          quantize_activations(x.cview().row_slice(0, 1), xq);
          for (const auto& v : cpu::int_dot_variants()) {
            std::vector<float> want(static_cast<size_t>(c.n)), got(want.size());
            v.fn(w.wide.view(), 0, c.n, xq.codes(0), xq.scales(0), want.data());
            v.fn(w.narrow.view(), 0, c.n, xq.codes(0), xq.scales(0), got.data());
            EXPECT_EQ(differing_floats(got, want), 0) << v.name << " K=" << c.k << " g" << c.group;
          }
          for (SimdLevel level : available_simd_levels()) {
            const cpu::SimdKernels& k = cpu::kernels_for(level);
            if (k.prepare_int_x == nullptr) continue;
            std::vector<uint8_t> buffer(cpu::int_x_prepared_bytes(c.k) + 32);
            uint8_t* aligned = buffer.data() + (32 - reinterpret_cast<uintptr_t>(buffer.data()) % 32) % 32;
            if (!k.prepare_int_x(w.wide.view(), xq.codes(0), xq.scales(0), aligned)) continue;
            std::vector<float> want(static_cast<size_t>(c.n)), got(want.size());
            k.dot_rows_int_prepared(w.wide.view(), 0, c.n, aligned, xq.codes(0), xq.scales(0), want.data());
            k.dot_rows_int_prepared(w.narrow.view(), 0, c.n, aligned, xq.codes(0), xq.scales(0), got.data());
            EXPECT_EQ(differing_floats(got, want), 0)
                << simd_level_name(level) << " prepared K=" << c.k << " g" << c.group;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// |y_int8 - y_float| <= sum_b (amax_b / 254) * sum_{k in b} |W[n, k]| (ops/int8_activations.h), plus
// float32 rounding; and the error is not zero (the activations really were quantized).
TEST(IntMatmul, ActivationQuantizationErrorWithinItsBound) {
  auto ref = reference_backend();
  uint64_t seed = 900;
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    for (const IntCase& c : kIntCases) {
      const TestWeight w = random_int_weight(format, c.n, c.k, c.group, true, ++seed);
      const GuardedMatrix x = edge_activations(c.t, c.k, ++seed);
      GuardedMatrix exact(c.t, c.n);
      ref->matmul({.x = x.cview(), .w = w.view(), .y = exact.view(), .exact = true});
      const auto e = exact.values();
      double max_err = 0.0;
      for (auto& nb : backends_under_test()) {
        GuardedMatrix got(c.t, c.n);
        nb.backend->matmul({.x = x.cview(), .w = w.view(), .y = got.view(), .exact = false});
        const auto g = got.values();
        for (int64_t t = 0; t < c.t; ++t) {
          const float* xr = x.cview().row(t);
          for (int64_t n = 0; n < c.n; ++n) {
            double bound = 0.0, mag = 0.0;
            for (int64_t b0 = 0; b0 < c.k; b0 += kIntBlock) {
              double amax = 0.0, wsum = 0.0;
              for (int64_t k = b0; k < std::min(c.k, b0 + kIntBlock); ++k) {
                amax = std::max(amax, static_cast<double>(std::fabs(xr[k])));
                wsum += std::fabs(w.view().at(n, k));
                mag += std::fabs(w.view().at(n, k) * xr[k]);
              }
              bound += amax / 254.0 * wsum;
            }
            const size_t i = static_cast<size_t>(t * c.n + n);
            const double err = std::fabs(static_cast<double>(g[i]) - e[i]);
            max_err = std::max(max_err, err);
            EXPECT_LE(err, bound * 1.0001 + 1e-5 * mag)
                << nb.label << " " << weight_format_name(format) << " T=" << c.t << " K=" << c.k << " [" << t
                << ", " << n << "]";
          }
        }
      }
      if (c.k > 1) {
        EXPECT_GT(max_err, 0.0) << "K=" << c.k << ": no quantization error at all";
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
