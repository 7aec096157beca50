// Differential tests of the dense ops: every backend and SIMD level against reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/core/numeric.h"
#include "day0/ops/rope_table.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

struct MatmulShape {
  int64_t t, k, n;
};
// Odd sizes, sizes that are not multiples of the vector width, decode (T = 1..4, GEMV) and prefill
// (T > 4, GEMM with partial tiles), FP8 partial scale blocks (K, N not multiples of 128); {19, 531, 45}
// has an odd K that ends inside a 256-column K block of the BF16 GEMM (a half pair, 16-pair column
// blocks and weight rows past the panel all partial); the last one spans two M chunks and two K blocks
// of the AMX GEMM (512 rows, 1024 columns) with tails in each.
constexpr MatmulShape kMatmulShapes[] = {
    {1, 37, 5},    {1, 64, 7},   {1, 300, 33},  {2, 96, 129},  {4, 256, 64},  {5, 37, 31},    {7, 96, 50},
    {13, 320, 65}, {6, 544, 40}, {19, 531, 45}, {64, 512, 96}, {1, 4096, 24}, {520, 1100, 40}};

TEST(Differential, MatmulEveryFormatAndShape) {
  Differential diff;
  uint64_t seed = 1;
  for (WeightFormat format : kAllWeightFormats) {
    for (const auto& s : kMatmulShapes) {
      if (!format_fits(format, s.k)) continue;
      const TestWeight w = random_weight(format, s.n, s.k, ++seed);
      const auto bias = random_vector(s.n, ++seed);
      GuardedMatrix x(s.t, s.k);
      x.fill_random(++seed);
      // plain, + bias, accumulate into y; then the same three not exact (BF16 GEMMs where present)
      for (int variant = 0; variant < 6; ++variant) {
        const bool exact = variant < 3;
        const int kind = variant % 3;
        const std::string name =
            fmt::format("{} T={} K={} N={}{}{}", weight_format_name(format), s.t, s.k, s.n,
                        kind == 1   ? " +bias"
                        : kind == 2 ? " accumulate"
                                    : "",
                        exact ? "" : " inexact");
        // exact: float32 products whatever the row count (no BF16 GEMM); inexact may round to BF16.
        const double tol = exact ? kTolFloat : matmul_tolerance(format);
        diff.check("matmul", name, s.t, s.n, tol, [&](Backend& be, GuardedMatrix& out) {
          if (kind == 2) out.fill_random(99);
          be.matmul({.x = x.cview(),
                     .w = w.view(),
                     .bias = kind == 1 ? bias.data() : nullptr,
                     .y = out.view(),
                     .accumulate = kind == 2,
                     .exact = exact});
        });
      }
    }
  }
  diff.finish();
}

TEST(Differential, EmbeddingEveryFormat) {
  Differential diff;
  for (WeightFormat format : kAllWeightFormats) {
    const TestWeight table = random_weight(format, 50, 96, 7);
    const std::vector<int32_t> ids = {0, 49, 3, 3, 17};
    diff.check("embedding", weight_format_name(format), 5, 96, kTolExact,
               [&](Backend& be, GuardedMatrix& out) {
                 be.embedding({table.view(), ids, out.view()});
               });
  }
  diff.finish();
}

TEST(Differential, NormsAndElementwise) {
  Differential diff;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {3, 64}, {5, 129}, {17, 1000}}) {
    GuardedMatrix x(rows, cols);
    x.fill_random(rows * 31 + cols, 2.0f);
    const auto w = random_vector(cols, 5);
    const auto b = random_vector(cols, 6);
    const std::string shape = fmt::format("[{}, {}]", rows, cols);
    for (bool weighted : {true, false}) {
      diff.check("rms_norm", shape + (weighted ? " w" : " no w"), rows, cols, kTolFloat,
                 [&](Backend& be, GuardedMatrix& out) {
                   be.rms_norm({x.cview(), weighted ? std::span<const float>(w) : std::span<const float>(),
                                1e-5f, out.view()});
                 });
    }
    diff.check("layer_norm", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.layer_norm({x.cview(), w, b, 1e-5f, out.view()});
    });
    diff.check("softmax", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.scale({.x = x.cview(), .y = out.view()});  // copy, then in place
      be.softmax({out.view()});
    });
    diff.check("silu", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.silu({x.cview(), out.view()});
    });
    diff.check("sigmoid", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.sigmoid({x.cview(), out.view()});
    });
    diff.check("softplus", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.softplus({x.cview(), out.view()});
    });
    diff.check("tanh", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.tanh({x.cview(), out.view()});
    });
    for (GeluApprox approx : {GeluApprox::kErf, GeluApprox::kTanh}) {
      diff.check("gelu", shape + (approx == GeluApprox::kErf ? " erf" : " tanh"), rows, cols, kTolFloat,
                 [&](Backend& be, GuardedMatrix& out) {
                   be.gelu({x.cview(), out.view(), approx});
                 });
    }
    GuardedMatrix y(rows, cols);
    y.fill_random(77);
    GuardedMatrix row_vec(1, cols);
    row_vec.fill_random(78);
    GuardedMatrix col_vec(rows, 1);
    col_vec.fill_random(79);
    for (int bcast = 0; bcast < 3; ++bcast) {
      const ConstMatrix bm = bcast == 0 ? y.cview() : (bcast == 1 ? row_vec.cview() : col_vec.cview());
      const std::string name = shape + (bcast == 0 ? "" : (bcast == 1 ? " row-bcast" : " col-bcast"));
      diff.check("add", name, rows, cols, kTolExact, [&](Backend& be, GuardedMatrix& out) {
        be.add({x.cview(), bm, out.view()});
      });
      diff.check("mul", name, rows, cols, kTolExact, [&](Backend& be, GuardedMatrix& out) {
        be.mul({x.cview(), bm, out.view()});
      });
    }
    diff.check("clamp", shape, rows, cols, kTolExact, [&](Backend& be, GuardedMatrix& out) {
      be.clamp({.x = x.cview(), .y = out.view(), .lo = -0.5f, .hi = 0.7f});
    });
    diff.check("scale", shape, rows, cols, kTolExact, [&](Backend& be, GuardedMatrix& out) {
      be.scale({.x = x.cview(), .y = out.view(), .scale = 1.5f, .shift = -2.0f});
    });
    diff.check("rsqrt", shape, rows, cols, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.mul({x.cview(), x.cview(), out.view()});
      be.rsqrt({.x = out.view(), .y = out.view(), .eps = 1e-3f});
    });
    diff.check("row_mean", shape, rows, 1, kTolFloat,
               [&](Backend& be, GuardedMatrix& out) { be.row_mean({.x = x.cview(), .y = out.view()}); });
    diff.check("round_bf16", shape, rows, cols, kTolExact,
               [&](Backend& be, GuardedMatrix& out) { be.round_bf16({.x = x.cview(), .y = out.view()}); });
    // The rope part of every head into a dense matrix (MLA's gather): groups of `part` columns at the
    // end of each `group` columns.
    const int64_t groups = cols >= 4 ? 3 : 1, group = cols / groups, part = std::max<int64_t>(1, group / 3);
    diff.check("copy_columns", shape, rows, groups * part, kTolExact, [&](Backend& be, GuardedMatrix& out) {
      be.copy_columns({.x = x.cview(),
                       .y = out.view(),
                       .groups = groups,
                       .width = part,
                       .x_col0 = group - part,
                       .x_stride = group,
                       .y_col0 = 0,
                       .y_stride = part});
    });
  }
  diff.finish();
}

TEST(Differential, SwigluVariants) {
  Differential diff;
  for (auto [t, inter] : {std::pair<int64_t, int64_t>{1, 7}, {4, 64}, {9, 333}}) {
    GuardedMatrix gate(t, inter);
    GuardedMatrix up(t, inter);
    GuardedMatrix fused(t, 2 * inter);
    gate.fill_random(1, 4.0f);
    up.fill_random(2, 4.0f);
    fused.fill_random(3, 6.0f);  // beyond the clamp limit too
    const std::string shape = fmt::format("T={} I={}", t, inter);
    // 0: plain; 1: gpt-oss's clamp (alpha 1.702, up + 1); 2: DeepSeek-V4's (silu, limit 3, no shift).
    for (int variant : {0, 1, 2}) {
      for (bool interleaved : {false, true}) {
        const std::string op = variant > 0 ? "swiglu_clamped" : "swiglu";
        diff.check(op,
                   shape + (interleaved ? " interleaved" : "") + (variant == 2 ? " silu, no up shift" : ""),
                   t, inter, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
                     SwigluArgs a{.gate = interleaved ? fused.cview() : gate.cview(),
                                  .up = up.cview(),
                                  .out = out.view(),
                                  .interleaved = interleaved};
                     if (variant == 2) a.limit = 3.0f, a.alpha = 1.0f, a.up_shift = 0.0f;
                     variant > 0 ? be.swiglu_clamped(a) : be.swiglu(a);
                   });
      }
    }
  }
  diff.finish();
}

TEST(Differential, RopeLayoutsPartialAndScaling) {
  Differential diff;
  struct Case {
    RopeLayout layout;
    int64_t heads, head_dim, rotary_dim;
    RopeType type;
  };
  const Case cases[] = {{RopeLayout::kHalfSplit, 4, 64, 64, RopeType::kDefault},
                        {RopeLayout::kInterleaved, 2, 64, 64, RopeType::kYarn},
                        {RopeLayout::kHalfSplit, 3, 128, 64, RopeType::kLlama3},  // partial rotary
                        {RopeLayout::kInterleaved, 1, 40, 24, RopeType::kLinear}};
  for (const auto& c : cases) {
    RopeScaling scaling;
    scaling.type = c.type;
    scaling.factor = c.type == RopeType::kDefault ? 1.0 : 8.0;
    scaling.original_max_position = 4096;
    const auto freqs = rope_frequencies(10000.0, c.rotary_dim, scaling, 32768).value();
    for (int64_t t : {1, 7}) {
      std::vector<int64_t> positions;
      for (int64_t i = 0; i < t; ++i) positions.push_back(5000 + 13 * i);
      GuardedMatrix x(t, c.heads * c.head_dim);
      x.fill_random(t);
      const std::string name = fmt::format("{} T={} heads={} d={} rot={}",
                                           c.layout == RopeLayout::kHalfSplit ? "half" : "interleaved", t,
                                           c.heads, c.head_dim, c.rotary_dim);
      diff.check("rope", name, t, c.heads * c.head_dim, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
        be.scale({.x = x.cview(), .y = out.view()});
        be.rope({.x = out.view(),
                 .positions = positions,
                 .n_heads = c.heads,
                 .head_dim = c.head_dim,
                 .rotary_dim = c.rotary_dim,
                 .layout = c.layout,
                 .inv_freq = freqs.inv_freq,
                 .attention_factor = freqs.attention_factor});
      });
    }
  }
  diff.finish();
}

TEST(Differential, GatherAndScatter) {
  Differential diff;
  GuardedMatrix x(10, 33);
  x.fill_random(4);
  const std::vector<int32_t> idx = {9, 0, 0, 4};
  const std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.25f};
  diff.check("gather_rows", "4 of 10", 4, 33, kTolExact, [&](Backend& be, GuardedMatrix& out) {
    be.gather_rows({x.cview(), idx, out.view()});
  });
  GuardedMatrix src(4, 33);
  src.fill_random(5);
  diff.check("scatter_add", "4 into 10, repeated index", 10, 33, kTolFloat,
             [&](Backend& be, GuardedMatrix& out) {
               be.scatter_add({src.cview(), idx, w, out.view()});
             });
  diff.finish();
}

}  // namespace
}  // namespace day0::test

namespace day0::test {
namespace {

// The BF16 GEMM's route: DAY0_BF16_GEMM is dot or fma (anything else refused by name); the fma route of a
// call that may round gives the same bits as the exact float32 path, the dot route rounds x to BF16.
TEST(Bf16GemmRoute, EnvironmentIsCheckedAndTheFmaRouteIsTheExactPath) {
  const char* saved = std::getenv("DAY0_BF16_GEMM");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("DAY0_BF16_GEMM", "fastest", 1);
  const auto bad = make_backend("cpu");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().to_string().find("DAY0_BF16_GEMM"), std::string::npos) << bad.status().to_string();
  EXPECT_NE(bad.status().to_string().find("fastest"), std::string::npos) << bad.status().to_string();
  for (const char* ok : {"dot", "fma"}) {
    setenv("DAY0_BF16_GEMM", ok, 1);
    EXPECT_TRUE(make_backend("cpu").is_ok()) << ok;
  }
  if (saved != nullptr) {
    setenv("DAY0_BF16_GEMM", restore.c_str(), 1);
  } else {
    unsetenv("DAY0_BF16_GEMM");
  }
  if (!cpu_has_avx512_bf16()) {
    EXPECT_FALSE(bf16_dot_outruns_fma());
  }

  const TestWeight w = random_weight(WeightFormat::kBF16, 70, 300, 11);
  GuardedMatrix x(37, 300);
  x.fill_random(12);
  const auto run = [&](std::optional<bool> dot, bool exact) {
    BackendOptions opts;
    opts.n_threads = 2;
    // At most avx512: the amx level takes BF16 GEMMs before either route.
    opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
    opts.bf16_dot_gemm = dot;
    auto be = std::move(make_backend("cpu", opts).value());
    GuardedMatrix y(37, 70);
    be->matmul({.x = x.cview(), .w = w.view(), .y = y.view(), .exact = exact});
    return y.values();
  };
  const auto exact = run(false, true);
  EXPECT_EQ(run(false, false), exact);
  EXPECT_EQ(run(true, true), exact);
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: the dot route is not built";
  const auto dot = run(true, false);
  EXPECT_NE(dot, exact);              // x rounded to BF16
  EXPECT_LT(nmse(dot, exact), 1e-4);  // by about BF16's precision
}

// dot_rows_bf16x (x rounded to BF16, vdpbf16ps): every x of a several-x call gets the bits of the same x
// alone (the batch a token decodes in does not change its logits), and each dot is the float sum of the
// BF16 products to float32 accuracy. Tails of every width; x 4 KiB apart as the rows of an activation.
TEST(SimdKernels, Bf16xRowDotsMatchAcrossBatchesAndTheRoundedProducts) {
  uint64_t seed = 900;
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    if (k.dot_rows_bf16x == nullptr) continue;
    ++levels;
    const std::string lv(simd_level_name(level));
    for (int64_t cols : {int64_t{37}, int64_t{64}, int64_t{96}, int64_t{200}, int64_t{1030}}) {
      const TestWeight w = random_weight(WeightFormat::kBF16, 13, cols, ++seed);
      const auto* wbits = reinterpret_cast<const uint16_t*>(w.data.data());
      for (int64_t nx : {1, 2, 3, 4, 5, 9}) {
        std::vector<uint16_t> xb(static_cast<size_t>(nx * 2048));
        std::vector<const uint16_t*> xbs;
        for (int64_t t = 0; t < nx; ++t) {
          const auto x = random_vector(cols, ++seed, 2.0f);
          k.to_bf16(x.data(), cols, xb.data() + t * 2048);
          xbs.push_back(xb.data() + t * 2048);
        }
        for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 13}, {3, 10}, {12, 13}}) {
          const int64_t ld = n1 - n0 + 2;
          std::vector<float> got(static_cast<size_t>(nx * ld)), alone(static_cast<size_t>(n1 - n0));
          k.dot_rows_bf16x(w.view(), n0, n1, xbs.data(), nx, got.data(), ld);
          for (int64_t t = 0; t < nx; ++t) {
            k.dot_rows_bf16x(w.view(), n0, n1, &xbs[static_cast<size_t>(t)], 1, alone.data(), 1);
            for (int64_t i = 0; i < n1 - n0; ++i) {
              const float g = got[static_cast<size_t>(t * ld + i)];
              ASSERT_EQ(g, alone[static_cast<size_t>(i)])
                  << lv << " cols=" << cols << " nx=" << nx << " rows " << n0 << ".." << n1 << " x " << t;
              double want = 0.0, scale = 0.0;
              for (int64_t j = 0; j < cols; ++j) {
                const double term = static_cast<double>(bf16_to_f32(wbits[(n0 + i) * cols + j])) *
                                    static_cast<double>(bf16_to_f32(xbs[static_cast<size_t>(t)][j]));
                want += term;
                scale += std::fabs(term);
              }
              ASSERT_NEAR(g, want, 1e-6 * scale + 1e-30) << lv << " cols=" << cols << " row " << n0 + i;
            }
          }
        }
      }
    }
  }
  if (levels == 0)
    GTEST_SKIP() << "no SIMD level here has vdpbf16ps (AVX-512 BF16): dot_rows_bf16x is not built";
}

// pack_bf16_x16 + dot_rows_bf16_x16 (5-16 tokens without weight panels): xt holds each token's BF16 pairs
// in its lane and zeros elsewhere; every lane's dot is the float sum of the BF16 products, lanes without a
// token give 0, and a token's dots have the same bits packed alone as among 16. Odd and even widths, row
// counts around the kernel's block of 8, weight rows only 2-byte aligned, x rows with a stride.
TEST(SimdKernels, Bf16x16RowsSumTheRoundedPairsOfEveryLane) {
  uint64_t seed = 1700;
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    ASSERT_EQ(k.pack_bf16_x16 == nullptr, k.dot_rows_bf16_x16 == nullptr) << simd_level_name(level);
    if (k.dot_rows_bf16_x16 == nullptr) continue;
    ++levels;
    const std::string lv(simd_level_name(level));
    for (int64_t cols : {int64_t{1}, int64_t{37}, int64_t{64}, int64_t{200}, int64_t{1031}}) {
      const int64_t pairs = (cols + 1) / 2, ldx = cols + 5;
      for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, int64_t{17}}) {
        // exactly sized, one element of offset: a read past the last row is caught under ASan
        std::vector<uint16_t> wstore(static_cast<size_t>(rows * cols + 1));
        const auto wv = random_vector(rows * cols, ++seed, 2.0f);
        for (size_t i = 0; i < wv.size(); ++i) wstore[i + 1] = f32_to_bf16(wv[i]);
        const uint16_t* w = wstore.data() + 1;
        for (int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{16}}) {
          const auto x = random_vector(tokens * ldx, ++seed, 2.0f);  // [tokens][ldx]
          std::vector<uint32_t> xt(static_cast<size_t>(pairs * 16), 0xdeadbeefu);
          k.pack_bf16_x16(x.data(), ldx, tokens, cols, xt.data());
          for (int64_t p = 0; p < pairs; ++p) {
            for (int64_t t = 0; t < 16; ++t) {
              const uint32_t got = xt[static_cast<size_t>(p * 16 + t)];
              uint32_t want = 0;
              if (t < tokens) {
                want = f32_to_bf16(x[static_cast<size_t>(t * ldx + 2 * p)]);
                if (2 * p + 1 < cols)
                  want |= uint32_t{f32_to_bf16(x[static_cast<size_t>(t * ldx + 2 * p + 1)])} << 16;
              }
              ASSERT_EQ(got, want) << lv << " cols=" << cols << " tokens=" << tokens << " pair " << p
                                   << " lane " << t;
            }
          }
          std::vector<float> out(static_cast<size_t>(rows * 16), -1.0f);
          k.dot_rows_bf16_x16(w, cols, rows, cols, xt.data(), 1, out.data());
          for (int64_t t = 0; t < 16; ++t) {
            std::vector<uint32_t> alone(static_cast<size_t>(pairs * 16));
            std::vector<float> alone_out(static_cast<size_t>(rows * 16));
            if (t < tokens) {
              k.pack_bf16_x16(x.data() + t * ldx, ldx, 1, cols, alone.data());
              k.dot_rows_bf16_x16(w, cols, rows, cols, alone.data(), 1, alone_out.data());
            }
            for (int64_t i = 0; i < rows; ++i) {
              const float g = out[static_cast<size_t>(i * 16 + t)];
              const std::string where =
                  fmt::format("{} cols={} rows={} tokens={} row {} lane {}", lv, cols, rows, tokens, i, t);
              if (t >= tokens) {
                ASSERT_EQ(g, 0.0f) << where;
                continue;
              }
              ASSERT_EQ(g, alone_out[static_cast<size_t>(i * 16)]) << where;
              double want = 0.0, scale = 0.0;
              for (int64_t j = 0; j < cols; ++j) {
                const double term =
                    static_cast<double>(bf16_to_f32(w[i * cols + j])) *
                    static_cast<double>(bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(t * ldx + j)])));
                want += term;
                scale += std::fabs(term);
              }
              ASSERT_NEAR(g, want, 1e-6 * scale + 1e-30) << where;
            }
          }
        }
      }
    }
  }
  if (levels == 0)
    GTEST_SKIP() << "no SIMD level here has vdpbf16ps (AVX-512 BF16): dot_rows_bf16_x16 is not built";
}

// widen_bf16_rows (a page's rows of one KV head): every level gives each element's exact float32, for
// rows `ld` apart, widths with vector tails and none, and reads nothing past the last row's columns.
TEST(SimdKernels, WidenBf16RowsIsExactAtEveryLevel) {
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    if (k.widen_bf16_rows == nullptr) continue;
    ++levels;
    for (int64_t cols :
         {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{16}, int64_t{64}, int64_t{77}, int64_t{128}}) {
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{32}}) {
        const int64_t ld = cols + 5;
        // Exactly what is read: the last row ends at its last column. NaN and infinity patterns too.
        std::vector<uint16_t> src(static_cast<size_t>((rows - 1) * ld + cols));
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
        src[0] = 0x7fc1;                      // a NaN with payload
        if (src.size() > 1) src[1] = 0xff80;  // -inf
        std::vector<float> out(static_cast<size_t>(rows * cols), -7.0f);
        k.widen_bf16_rows(src.data(), ld, rows, cols, out.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const float want = bf16_to_f32(src[static_cast<size_t>(r * ld + c)]);
            const float got = out[static_cast<size_t>(r * cols + c)];
            ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0)
                << simd_level_name(level) << " rows=" << rows << " cols=" << cols << " at " << r << "," << c;
          }
        }
      }
    }
  }
  if (levels == 0) GTEST_SKIP() << "no SIMD level here has widen_bf16_rows";
}

// key_query_dots (attention scores with the queries in lanes): every level gives each score the bits of
// the fused multiply-add chain over the head's columns, whatever the key count (blocks of 8 / 6 and their
// remainders), lane count (16-lane blocks one or two at a time, an odd 8 after them) and key stride.
TEST(SimdKernels, KeyQueryDotsAreTheFmaChainAtEveryLevel) {
  uint64_t seed = 2100;
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    if (k.key_query_dots == nullptr) continue;
    ++levels;
    for (int64_t d : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{128}}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, int64_t{30}}) {
        for (int64_t ldq : {int64_t{8}, int64_t{16}, int64_t{24}, int64_t{32}, int64_t{40}, int64_t{48}}) {
          const int64_t ldk = d + 3;
          const auto keys = random_vector(n * ldk, ++seed, 2.0f);
          const auto qt = random_vector(d * ldq, ++seed, 2.0f);
          std::vector<float> st(static_cast<size_t>(n * ldq), -1.0f);
          k.key_query_dots(keys.data(), ldk, n, qt.data(), ldq, d, st.data());
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < ldq; ++i) {
              float want = 0.0f;
              for (int64_t c = 0; c < d; ++c)
                want = std::fma(keys[static_cast<size_t>(j * ldk + c)], qt[static_cast<size_t>(c * ldq + i)],
                                want);
              ASSERT_EQ(st[static_cast<size_t>(j * ldq + i)], want)
                  << simd_level_name(level) << " d=" << d << " n=" << n << " ldq=" << ldq << " key " << j
                  << " lane " << i;
            }
          }
        }
      }
    }
  }
  if (levels == 0) GTEST_SKIP() << "no SIMD level here has key_query_dots (AVX2 or AVX-512)";
}

// BF16 matmuls of 5-128 tokens that may round (the dot route's few-token path, tiles of 16 token lanes
// taken two at a time): a token's outputs have the same bits whichever of those batch sizes and tile
// places it comes in, with bias and accumulation applied per token.
TEST(Bf16GemmRoute, FewTokenCallsGiveEachTokenTheBitsOfAnyOtherBatch) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: the few-token path is not built";
  const TestWeight w = random_weight(WeightFormat::kBF16, 150, 333, 31);
  const auto bias = random_vector(150, 32);
  GuardedMatrix x(40, 333);
  x.fill_random(33);
  const auto run = [&](int64_t first, int64_t rows, bool accumulate) {
    BackendOptions opts;
    opts.n_threads = 2;
    opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
    opts.bf16_dot_gemm = true;
    auto be = std::move(make_backend("cpu", opts).value());
    GuardedMatrix y(rows, 150);
    y.fill_random(34 + first);
    be->matmul({.x = x.cview().row_slice(first, rows),
                .w = w.view(),
                .bias = bias.data(),
                .y = y.view(),
                .accumulate = accumulate,
                .exact = false});
    return y.values();
  };
  const auto all = run(0, 40, false);  // tiles 0-1 as a pair, tile 2 alone
  for (auto [first, rows] : {std::pair<int64_t, int64_t>{3, 5}, {8, 8}, {1, 13}, {20, 20}, {0, 33}}) {
    const auto some = run(first, rows, false);
    ASSERT_TRUE(std::equal(some.begin(), some.end(), all.begin() + first * 150)) << first << "+" << rows;
  }
  // accumulate adds each output to what y held (y filled with seed 34 + first)
  GuardedMatrix before(5, 150);
  before.fill_random(34 + 3);
  const auto acc = run(3, 5, true);
  const auto held = before.values();
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], held[i] + all[3 * 150 + i]) << i;
}

// A few-token BF16 matmul of a matrix of several megabytes: the threads take its rows in items of about
// kGemvChunkBytes (512 rows here, several kernel calls each, the last item short and ending inside a call).
// Every row must be written, within BF16 rounding of the exact float32 product, for 16 and 40 tokens.
TEST(Bf16GemmRoute, FewTokenCallsCoverEveryRowOfALargeMatrix) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: the few-token path is not built";
  const TestWeight w = random_weight(WeightFormat::kBF16, 1500, 1024, 35);
  BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
  opts.bf16_dot_gemm = true;
  auto be = std::move(make_backend("cpu", opts).value());
  for (int64_t t : {int64_t{16}, int64_t{40}}) {
    GuardedMatrix x(t, 1024);
    x.fill_random(36 + t);
    const auto run = [&](bool exact) {
      GuardedMatrix y(t, 1500);
      y.fill_random(99);  // what a skipped row would keep
      be->matmul({.x = x.cview(), .w = w.view(), .y = y.view(), .exact = exact});
      EXPECT_TRUE(y.guards_intact());
      return y.values();
    };
    const auto few = run(false), exact = run(true);
    for (int64_t r = 0; r < t; ++r) {
      const auto row = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + r * 1500, v.begin() + (r + 1) * 1500);
      };
      for (int64_t n0 = 0; n0 < 1500; n0 += 100) {  // every block of 100 outputs of every token
        const auto part = [&](const std::vector<float>& v) {
          const auto whole = row(v);
          return std::vector<float>(whole.begin() + n0, whole.begin() + std::min<int64_t>(1500, n0 + 100));
        };
        ASSERT_LT(nmse(part(few), part(exact)), 1e-4) << "T=" << t << " token " << r << " rows from " << n0;
      }
    }
  }
}

// Decode matmuls of a matrix of several megabytes: the cpu backend takes its rows in chunks of about
// kGemvChunkBytes from a shared counter (the last chunk short). Every row must be written once, with
// the float32 sums of the reference, for one to four tokens, float32 and BF16 weights, every backend.
TEST(Differential, DecodeMatmulRowsInSeveralChunks) {
  Differential diff;
  uint64_t seed = 900;
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16}) {
    const TestWeight w = random_weight(format, 1000, 2048, ++seed);
    for (int64_t t : {int64_t{1}, int64_t{3}}) {
      GuardedMatrix x(t, 2048);
      x.fill_random(++seed);
      diff.check("matmul", fmt::format("{} T={} K=2048 N=1000", weight_format_name(format), t), t, 1000,
                 kTolFloat, [&](Backend& be, GuardedMatrix& out) {
                   be.matmul({.x = x.cview(), .w = w.view(), .y = out.view(), .exact = true});
                 });
    }
  }
  diff.finish();
}

// Decode-sized BF16 matmuls that may round (not exact) take x in BF16 exactly where the GEMM does (its
// dot route): then a row of a 3-token call has the bits of that token alone, differs from the exact
// float32 result by about BF16's precision, and the FMA route keeps the exact path.
TEST(Bf16GemmRoute, DecodeRowDotsRoundXWhereTheGemmDoes) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: x is never rounded in the row dots";
  const TestWeight w = random_weight(WeightFormat::kBF16, 70, 300, 21);
  GuardedMatrix x(3, 300);
  x.fill_random(22);
  const auto run = [&](bool dot, bool exact, int64_t first, int64_t rows) {
    BackendOptions opts;
    opts.n_threads = 2;
    opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
    opts.bf16_dot_gemm = dot;
    auto be = std::move(make_backend("cpu", opts).value());
    GuardedMatrix y(rows, 70);
    be->matmul({.x = x.cview().row_slice(first, rows), .w = w.view(), .y = y.view(), .exact = exact});
    return y.values();
  };
  const auto exact = run(true, true, 0, 3);
  EXPECT_EQ(run(false, false, 0, 3), exact);
  const auto rounded = run(true, false, 0, 3);
  EXPECT_NE(rounded, exact);
  EXPECT_LT(nmse(rounded, exact), 1e-4);
  const auto second = run(true, false, 1, 1);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), rounded.begin() + 70));
}

// The optional kernels of a SIMD level's table against the ones they stand in for, bit for bit:
// pack_f32_panel against dequant_row + transpose (zeros past the panel's rows), dot_rows_multi against
// dot_rows per x, dot_many against dot, axpy_rows against axpy row after row. Sizes with tails of every
// vector width.
TEST(SimdKernels, OptionalKernelsGiveTheBitsOfThePlainOnes) {
  uint64_t seed = 500;
  for (SimdLevel level : available_simd_levels()) {
    const cpu::SimdKernels& k = cpu::kernels_for(level);
    const std::string lv(simd_level_name(level));
    if (k.pack_f32_panel != nullptr) {
      for (WeightFormat format : kAllWeightFormats) {
        for (int64_t cols : {int64_t{275}, int64_t{512}, int64_t{64}}) {
          if (!format_fits(format, cols)) continue;
          const TestWeight w = random_weight(format, 45, cols, ++seed);
          for (int64_t n0 : {int64_t{0}, int64_t{32}}) {
            const int64_t rows = std::min<int64_t>(cpu::kNr, 45 - n0);
            for (int64_t k0 = 0; k0 < cols; k0 += 256) {
              const int64_t kc = std::min<int64_t>(256, cols - k0);
              std::vector<float> packed(static_cast<size_t>(kc * cpu::kNr), -1.0f),
                  row(static_cast<size_t>(kc));
              k.pack_f32_panel(w.view(), n0, rows, k0, kc, packed.data());
              for (int64_t j = 0; j < cpu::kNr; ++j) {
                if (j < rows) k.dequant_row(w.view(), n0 + j, k0, kc, row.data());
                for (int64_t c = 0; c < kc; ++c) {
                  const float want = j < rows ? row[static_cast<size_t>(c)] : 0.0f;
                  ASSERT_EQ(packed[static_cast<size_t>(c * cpu::kNr + j)], want)
                      << lv << " " << weight_format_name(format) << " cols=" << cols << " n0=" << n0
                      << " k0=" << k0 << " j=" << j << " c=" << c;
                }
              }
            }
          }
        }
      }
    }
    if (k.dot_rows_multi != nullptr) {
      for (WeightFormat format : kAllWeightFormats) {
        for (int64_t cols : {int64_t{37}, int64_t{64}, int64_t{200}}) {
          if (!format_fits(format, cols)) continue;
          const TestWeight w = random_weight(format, 13, cols, ++seed);
          for (int64_t nx : {1, 2, 3, 4, 5, 9}) {
            std::vector<std::vector<float>> xv;
            std::vector<const float*> xs;
            for (int64_t t = 0; t < nx; ++t) xv.push_back(random_vector(cols, ++seed));
            for (const auto& v : xv) xs.push_back(v.data());
            for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 13}, {3, 10}, {12, 13}}) {
              const int64_t ld = n1 - n0 + 2;
              std::vector<float> got(static_cast<size_t>(nx * ld)), want(static_cast<size_t>(n1 - n0));
              k.dot_rows_multi(w.view(), n0, n1, xs.data(), nx, got.data(), ld);
              for (int64_t t = 0; t < nx; ++t) {
                k.dot_rows(w.view(), n0, n1, xs[static_cast<size_t>(t)], want.data());
                for (int64_t i = 0; i < n1 - n0; ++i)
                  ASSERT_EQ(got[static_cast<size_t>(t * ld + i)], want[static_cast<size_t>(i)])
                      << lv << " dot_rows_multi " << weight_format_name(format) << " cols=" << cols
                      << " nx=" << nx << " rows " << n0 << ".." << n1 << " x " << t << " row " << n0 + i;
              }
            }
          }
        }
      }
    }
    for (int64_t n : {1, 7, 8, 15, 16, 33, 64, 129}) {
      for (int64_t rows : {1, 3, 4, 9}) {
        const int64_t ld = n + 3;
        const auto a = random_vector(n, ++seed);
        const auto b = random_vector(rows * ld, ++seed);
        if (k.dot_many != nullptr) {
          std::vector<float> got(static_cast<size_t>(rows));
          k.dot_many(a.data(), b.data(), ld, rows, n, got.data());
          for (int64_t j = 0; j < rows; ++j)
            EXPECT_EQ(got[static_cast<size_t>(j)], k.dot(a.data(), b.data() + j * ld, n))
                << lv << " dot_many n=" << n << " rows=" << rows << " row " << j;
        }
        if (k.axpy_rows != nullptr) {
          auto got = random_vector(n, ++seed);
          auto want = got;
          const auto alpha = random_vector(rows, ++seed);
          k.axpy_rows(alpha.data(), b.data(), ld, rows, got.data(), n);
          for (int64_t j = 0; j < rows; ++j)
            k.axpy(alpha[static_cast<size_t>(j)], b.data() + j * ld, want.data(), n);
          EXPECT_EQ(got, want) << lv << " axpy_rows n=" << n << " rows=" << rows;
        }
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
