// FP8 block and FP4 (E2M1) weights holding the codes that decode wrongly most easily (NaN, the largest
// finite value, negative zero, subnormals) under E8M0-derived scales (NaN, 2^-127) and float scales,
// through the cpu backend's matmul at every SIMD level of this CPU and the reference backend, against
// the scalar definition (WeightView::at) summed in double: NaN in exactly the rows that hold one, the
// other rows within float32 rounding. Decode (one token: the row dots) and prefill (five tokens: the
// dequantised panels) both; dequant_row of every level gives at()'s bits. NVFP4 (E4M3 group scales with
// NaN, saturated, subnormal and zero codes, times a global scale, zero included) the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/core/numeric.h"
#include "op_test_support.h"

namespace day0::test {
namespace {

constexpr uint8_t kE8m0Nan = 0xff;

// E4M3 codes: random finite ones, and in chosen rows NaN (0x7f / 0xff), +-448 (0x7e / 0xfe), -0 (0x80)
// and the smallest subnormal (0x01).
std::vector<uint8_t> fp8_codes(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));  // [rows, cols]
  for (auto& c : codes) {
    do {
      c = static_cast<uint8_t>(rng());
    } while ((c & 0x7f) == 0x7f);
  }
  auto at = [&](int64_t r, int64_t c) -> uint8_t& { return codes[static_cast<size_t>(r * cols + c)]; };
  for (int64_t c = 0; c < cols; ++c) {
    at(1, c) = c % 2 == 0 ? 0x7e : 0xfe;  // saturated row
    at(2, c) = 0x80;                      // negative zeros only
    at(4, c) = c % 3 == 0 ? 0x01 : 0x81;  // subnormals only
  }
  at(3, 10) = 0x7f;        // NaN
  at(7, cols - 1) = 0xff;  // NaN in the last (partial) block
  return codes;
}

// Float multipliers from E8M0 exponent bytes around 2^0, one block NaN and one 2^-127.
std::vector<float> e8m0_block_scales(int64_t n, uint64_t seed, int64_t nan_at, int64_t tiny_at) {
  std::mt19937_64 rng(seed);
  std::vector<float> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t u = static_cast<uint8_t>(118 + rng() % 15);
    if (i == nan_at) u = kE8m0Nan;
    if (i == tiny_at) u = 0;
    s[static_cast<size_t>(i)] = e8m0_to_f32(u);
  }
  return s;
}

TestWeight fp8_weight(int64_t rows, int64_t cols, int64_t block, uint64_t seed) {
  TestWeight w;
  w.format = WeightFormat::kFp8Block;
  w.rows = rows;
  w.cols = cols;
  w.block_rows = block;
  w.block_cols = block;
  w.data = fp8_codes(rows, cols, seed);
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  // NaN scale: the last block of the last block row (a partial one); 2^-127: the first block of row block 0.
  const auto s = e8m0_block_scales(br * bc, seed + 1, br * bc - 1, 0);
  w.scales.resize(s.size() * 4);
  std::memcpy(w.scales.data(), s.data(), w.scales.size());
  return w;
}

// E2M1 nibbles with every code (NaN-free by construction: E2M1 has none), -0 (0x8) rows, and E8M0 scales
// per `group` columns with one NaN group, one 2^-127 group and (past 8 rows) a row of the two smallest.
TestWeight fp4_weight(int64_t rows, int64_t cols, int64_t group, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TestWeight w;
  w.format = WeightFormat::kMxfp4;
  w.rows = rows;
  w.cols = cols;
  w.group = group;
  w.data.resize(static_cast<size_t>(rows * cols / 2));  // [rows, cols / 2]
  for (auto& b : w.data) b = static_cast<uint8_t>(rng());
  for (int64_t c = 0; c < cols / 2; ++c) {
    w.data[static_cast<size_t>(2 * cols / 2 + c)] = 0x88;  // row 2: negative zeros only
    w.data[static_cast<size_t>(1 * cols / 2 + c)] = 0xf7;  // row 1: +6 and -6, the largest
  }
  const int64_t groups = cols / group;
  w.scales.resize(static_cast<size_t>(rows * groups));  // [rows, groups] E8M0
  for (auto& s : w.scales) s = static_cast<uint8_t>(118 + rng() % 15);
  w.scales[static_cast<size_t>(3 * groups + groups - 1)] = kE8m0Nan;  // row 3's last group NaN
  w.scales[static_cast<size_t>(5 * groups)] = 0;                      // row 5's first group 2^-127
  if (rows > 8) {  // row 8: 2^-127 and 2^-126 only, so that its result is theirs alone
    for (int64_t g = 0; g < groups; ++g) w.scales[static_cast<size_t>(8 * groups + g)] = g % 2 == 0 ? 0 : 1;
  }
  return w;
}

// NVFP4: the same nibbles as fp4_weight with E4M3 group scales of every kind: random finite ones, and
// in chosen rows NaN (0x7f, 0xff), the saturated +-448 (0x7e, 0xfe; negative scales flip the sign), the
// smallest subnormal (0x01), a zero (0x00); `global` multiplies them all (0 included).
TestWeight nvfp4_weight(int64_t rows, int64_t cols, float global, uint64_t seed) {
  TestWeight w = fp4_weight(rows, cols, 16, seed);
  w.fp4_scale_code = Fp4ScaleCode::kE4M3;
  w.fp4_global_scale = global;
  std::mt19937_64 rng(seed + 100);
  const int64_t groups = cols / 16;
  for (auto& s : w.scales) {
    do {
      s = static_cast<uint8_t>(rng());
    } while ((s & 0x7f) == 0x7f);
  }
  auto scale = [&](int64_t r, int64_t g) -> uint8_t& {
    return w.scales[static_cast<size_t>(r * groups + g)];
  };
  scale(3, groups - 1) = 0x7f;  // NaN, the last group
  scale(4, 0) = 0xff;           // negative NaN, the first group
  for (int64_t g = 0; g < groups; ++g) {
    scale(6, g) = g % 2 == 0 ? 0x7e : 0xfe;  // +-448
    scale(7, g) = g % 2 == 0 ? 0x01 : 0x00;  // 2^-9 and zero
  }
  scale(1, 0) = 0x7e;  // +-6 nibbles under the largest scale
  return w;
}

std::unique_ptr<Backend> backend_at(const std::string& name, std::optional<SimdLevel> level) {
  BackendOptions opts;
  opts.n_threads = 2;
  opts.quiet = true;
  opts.simd = level;
  return std::move(make_backend(name, opts)).value();
}

// y = x W^T on every backend configuration against the double sum of at(): NaN rows alike, others close.
void expect_matmul_matches_definition(const TestWeight& tw, const std::string& what) {
  const WeightView w = tw.view();
  ASSERT_TRUE(w.valid()) << what;
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> backends;
  backends.emplace_back("reference", backend_at("reference", std::nullopt));
  for (SimdLevel level : available_simd_levels())
    backends.emplace_back(std::string("cpu ") + simd_level_name(level), backend_at("cpu", level));
  for (int64_t tokens : {int64_t{1}, int64_t{5}}) {
    GuardedMatrix x(tokens, w.cols);
    x.fill_random(static_cast<uint64_t>(tokens) + 11);
    const auto xv = x.values();  // [tokens, cols]
    for (auto& [name, be] : backends) {
      GuardedMatrix y(tokens, w.rows);
      be->matmul({.x = x.cview(), .w = w, .y = y.view(), .exact = true});
      ASSERT_TRUE(y.guards_intact()) << what << " " << name;
      const auto got = y.values();  // [tokens, rows]
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t n = 0; n < w.rows; ++n) {
          double ref = 0.0, magnitude = 0.0;
          for (int64_t k = 0; k < w.cols; ++k) {
            const double p = static_cast<double>(w.at(n, k)) * xv[static_cast<size_t>(t * w.cols + k)];
            ref += p;
            magnitude += std::fabs(p);
          }
          const float g = got[static_cast<size_t>(t * w.rows + n)];
          const std::string where = what + " " + name + " T=" + std::to_string(tokens) + " token " +
                                    std::to_string(t) + " row " + std::to_string(n);
          if (std::isnan(ref)) {
            EXPECT_TRUE(std::isnan(g)) << where << ": " << g;
          } else {
            EXPECT_NEAR(g, ref, 1e-5 * magnitude + 1e-37) << where;
          }
        }
      }
    }
  }
  // dequant_row: the bits of at() (NaN as NaN), whole rows and a block-aligned tail.
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
      k.dequant_row(w, n, 0, w.cols, row.data());
      for (int64_t c = 0; c < w.cols; ++c) {
        const float want = w.at(n, c), g = row[static_cast<size_t>(c)];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(g)) << what << " " << simd_level_name(level) << " row " << n << " col " << c;
        } else {
          ASSERT_EQ(f32_to_bits(g), f32_to_bits(want))
              << what << " " << simd_level_name(level) << " row " << n << " col " << c << ": " << g;
        }
      }
    }
  }
}

// The row dots of every level against x laid out once by the level's own order_x (dot_rows_ordered, a few
// rows a call as the drivers take them): the double sum of at() within float32 rounding, NaN in exactly
// the rows that hold one, and dot_rows' bits. FP4 x in mxfp4 order, as the drivers pass it.
void expect_ordered_rows_match_definition(const TestWeight& tw, const std::string& what) {
  const WeightView w = tw.view();
  const auto x = random_vector(w.cols, 77);
  std::vector<float> xin(x.size()), xo(x.size());
  if (w.format == WeightFormat::kMxfp4) {
    cpu::prepare_mxfp4_x(x.data(), w.cols, xin.data());
  } else {
    xin = x;
  }
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    ASSERT_EQ(k.order_x == nullptr, k.dot_rows_ordered == nullptr) << simd_level_name(level);
    if (k.order_x == nullptr) continue;
    ++levels;
    std::vector<float> want(static_cast<size_t>(w.rows)), got(static_cast<size_t>(w.rows));
    k.dot_rows(w, 0, w.rows, xin.data(), want.data());
    const float* xg = k.order_x(w, xin.data(), xo.data()) ? xo.data() : xin.data();
    for (int64_t n0 = 0; n0 < w.rows; n0 += 8)
      k.dot_rows_ordered(w, n0, std::min(w.rows, n0 + 8), xg, got.data() + n0);
    for (int64_t n = 0; n < w.rows; ++n) {
      const std::string where = what + " " + simd_level_name(level) + " row " + std::to_string(n);
      double ref = 0.0, magnitude = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double p = static_cast<double>(w.at(n, c)) * x[static_cast<size_t>(c)];
        ref += p;
        magnitude += std::fabs(p);
      }
      const float g = got[static_cast<size_t>(n)], d = want[static_cast<size_t>(n)];
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(g)) << where << ": " << g;
        EXPECT_TRUE(std::isnan(d)) << where << ": " << d;
      } else {
        EXPECT_NEAR(g, ref, 1e-5 * magnitude + 1e-37) << where;
        EXPECT_EQ(f32_to_bits(g), f32_to_bits(d)) << where;
      }
    }
  }
  if (levels == 0) GTEST_SKIP() << "no SIMD level here lays x out for its row dots";
}

TEST(WeightFormatDecode, Fp8BlocksOf32And128WithE8m0Scales) {
  expect_matmul_matches_definition(fp8_weight(70, 300, 32, 1), "FP8 32x32");
  expect_matmul_matches_definition(fp8_weight(70, 300, 128, 2), "FP8 128x128");
  expect_matmul_matches_definition(fp8_weight(40, 64, 32, 3), "FP8 32x32 whole blocks");
}

TEST(WeightFormatDecode, Fp4GroupsOf32And16WithE8m0Scales) {
  expect_matmul_matches_definition(fp4_weight(45, 320, 32, 4), "FP4 g32");
  expect_matmul_matches_definition(fp4_weight(45, 320, 16, 5), "FP4 g16");
  expect_matmul_matches_definition(fp4_weight(9, 32, 16, 6), "FP4 g16 one block");
}

// NVFP4 under a typical global scale (weight_scale_2 = amax / 2688 of a unit-range weight), one (the scales
// as stored) and zero (every finite scale 0, NaN scales NaN).
TEST(WeightFormatDecode, Nvfp4WithE4m3ScalesAndAGlobalScale) {
  for (float global : {1.0f / 2688.0f, 1.0f, 0.0f}) {
    const std::string g = " global " + std::to_string(global);
    expect_matmul_matches_definition(nvfp4_weight(45, 320, global, 21), "NVFP4" + g);
    expect_matmul_matches_definition(nvfp4_weight(9, 32, global, 22), "NVFP4 one block" + g);
  }
  // at(): the definition against numeric.h's decoders, one element a case.
  const TestWeight tw = nvfp4_weight(9, 32, 0.25f, 23);
  const WeightView w = tw.view();
  EXPECT_TRUE(std::isnan(w.at(3, 31)));
  EXPECT_TRUE(std::isnan(w.at(4, 0)));
  EXPECT_EQ(w.at(1, 0), 6.0f * 448.0f * 0.25f);  // byte 0xf7: even column +6
  EXPECT_EQ(w.at(1, 1), -6.0f * 448.0f * 0.25f);
  EXPECT_EQ(w.at(7, 16), 0.0f);
}

TEST(WeightFormatDecode, Nvfp4RowsOnTheLevelsOwnXLayout) {
  const TestWeight shapes[] = {nvfp4_weight(45, 320, 1.0f / 2688.0f, 24), nvfp4_weight(9, 384, 0.5f, 25),
                               nvfp4_weight(9, 32, 0.0f, 26), nvfp4_weight(12, 2176, 2.0f, 27)};
  for (const TestWeight& w : shapes) {
    expect_ordered_rows_match_definition(w, "NVFP4 cols " + std::to_string(w.cols));
  }
}

// Whole 64-column steps (the byte-table path) and other widths, 32x32 and 128x128 blocks.
TEST(WeightFormatDecode, Fp8RowsOnTheLevelsOwnXLayout) {
  const TestWeight shapes[] = {fp8_weight(70, 300, 32, 11), fp8_weight(40, 64, 32, 12),
                               fp8_weight(20, 384, 128, 13), fp8_weight(20, 320, 128, 14)};
  for (const TestWeight& w : shapes) {
    const std::string what = "FP8 " + std::to_string(w.block_cols) + " cols " + std::to_string(w.cols);
    expect_ordered_rows_match_definition(w, what);
  }
}

// x scaled by a power of two scales every product and sum exactly, so each level's row dots give the
// unscaled bits times that power, far from x's overflow and underflow. The avx2 FP8 rows carry weights at
// 2^-120 and x at 2^60 (kernels_avx2.cpp): x near 2^40 and near 2^-40 stay inside what that exactness
// covers, and a larger x factor there (2^100: x beyond 2^28 overflows) fails this.
TEST(WeightFormatDecode, Fp8RowsScaleExactlyWithLargeAndSmallActivations) {
  TestWeight tw = fp8_weight(20, 384, 128, 21);
  for (uint8_t& code : tw.data) {
    if ((code & 0x7f) == 0x7f) code = 0x7e;  // no NaN codes: every row's bits are compared
  }
  const float block_scales[] = {0.5f, 0.25f, 2.0f};  // no NaN or 2^-127 block either
  ASSERT_EQ(tw.scales.size(), sizeof(block_scales));
  std::memcpy(tw.scales.data(), block_scales, sizeof(block_scales));
  const WeightView w = tw.view();
  const auto x = random_vector(w.cols, 78);
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    std::vector<float> base(static_cast<size_t>(w.rows));
    k.dot_rows(w, 0, w.rows, x.data(), base.data());
    for (const int e : {40, -40}) {
      std::vector<float> xs(x.size()), got(static_cast<size_t>(w.rows));
      for (size_t c = 0; c < x.size(); ++c) xs[c] = std::ldexp(x[c], e);
      k.dot_rows(w, 0, w.rows, xs.data(), got.data());
      for (int64_t n = 0; n < w.rows; ++n) {
        const float b = base[static_cast<size_t>(n)], g = got[static_cast<size_t>(n)];
        const std::string where =
            std::string(simd_level_name(level)) + " x * 2^" + std::to_string(e) + " row " + std::to_string(n);
        ASSERT_TRUE(std::isnormal(b) || b == 0.0f) << where << ": " << b;
        EXPECT_EQ(f32_to_bits(g), f32_to_bits(std::ldexp(b, e))) << where << ": " << g;
      }
    }
  }
}

// Whole 128-column steps (the wide path, one with a short last load of scales) and other widths, groups of
// 32 and 16.
TEST(WeightFormatDecode, Fp4RowsOnTheLevelsOwnXLayout) {
  const TestWeight shapes[] = {fp4_weight(45, 320, 32, 15), fp4_weight(9, 256, 32, 16),
                               fp4_weight(9, 384, 16, 17), fp4_weight(9, 32, 16, 18),
                               fp4_weight(12, 2176, 16, 19)};
  for (const TestWeight& w : shapes) {
    const std::string what = "FP4 g" + std::to_string(w.group) + " cols " + std::to_string(w.cols);
    expect_ordered_rows_match_definition(w, what);
  }
}

// A row's dot does not depend on the rows computed beside it: the row dots walk FP8 and FP4 rows several
// at a time (the avx2 level four side by side), and the row-invariant steps of speculative decoding need
// one row alone to give the bits it gets in any group. Every level, rows one at a time against a whole
// range and a range starting off the group boundary, NaN rows included.
TEST(WeightFormatDecode, RowDotsGiveARowItsBitsWhateverRowsRunBesideIt) {
  const TestWeight shapes[] = {fp8_weight(70, 300, 32, 31),  fp8_weight(70, 320, 32, 36),
                               fp8_weight(21, 384, 128, 32), fp4_weight(45, 320, 32, 33),
                               fp4_weight(13, 384, 16, 34),  nvfp4_weight(19, 320, 1.0f / 2688.0f, 35)};
  for (const TestWeight& tw : shapes) {
    const WeightView w = tw.view();
    const auto x = random_vector(w.cols, 78);
    std::vector<float> xin(x.size());
    if (w.format == WeightFormat::kMxfp4) {
      cpu::prepare_mxfp4_x(x.data(), w.cols, xin.data());
    } else {
      xin = x;
    }
    for (SimdLevel level : available_simd_levels()) {
      const cpu::SimdKernels& k = cpu::kernels_for(level);
      const std::string what = std::string(weight_format_name(w.format)) + " " + std::to_string(w.rows) +
                               "x" + std::to_string(w.cols) + " " + simd_level_name(level);
      std::vector<float> whole(static_cast<size_t>(w.rows)), shifted(static_cast<size_t>(w.rows)), one(1);
      k.dot_rows(w, 0, w.rows, xin.data(), whole.data());
      k.dot_rows(w, 3, w.rows, xin.data(), shifted.data() + 3);
      for (int64_t n = 0; n < w.rows; ++n) {
        k.dot_rows(w, n, n + 1, xin.data(), one.data());
        const float a = whole[static_cast<size_t>(n)], b = one[0];
        if (std::isnan(b)) {
          EXPECT_TRUE(std::isnan(a)) << what << " row " << n;
          if (n >= 3) {
            EXPECT_TRUE(std::isnan(shifted[static_cast<size_t>(n)])) << what << " row " << n;
          }
        } else {
          EXPECT_EQ(f32_to_bits(a), f32_to_bits(b)) << what << " row " << n;
          if (n >= 3) {
            EXPECT_EQ(f32_to_bits(shifted[static_cast<size_t>(n)]), f32_to_bits(b)) << what << " row " << n;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
