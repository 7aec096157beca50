// The op schema table (shape functions, completeness), RoPE frequency scalings with the worked numbers
// of architectures.md §2.6, SIMD level parsing and the thread pool.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/backends/thread_pool.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"
#include "day0/ops/rope_table.h"

namespace day0 {
namespace {

TEST(OpSchema, EveryOpOfTheOperatorListHasASchema) {
  for (auto name :
       {op::kEmbedding, op::kMatmul, op::kRmsNorm, op::kLayerNorm, op::kRope, op::kAttention,
        op::kMlaAttention, op::kSoftmax, op::kSilu, op::kGelu, op::kSigmoid, op::kSwiglu, op::kSwigluClamped,
        op::kMoeRouter, op::kMoeExperts, op::kAdd, op::kMul, op::kArgmax, op::kSample}) {
    const OpSchema* s = find_op_schema(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_FALSE(s->primitive) << name;
    EXPECT_NE(s->shape, nullptr) << name;
  }
  EXPECT_EQ(find_op_schema("conv2d"), nullptr);
}

TEST(OpSchema, ShapeFunctions) {
  const OpSchema* mm = find_op_schema(op::kMatmul);
  const std::vector<Shape> ok = {{3, 64}, {128, 64}};
  EXPECT_EQ(mm->shape(ok, {}).value(), (std::vector<Shape>{{3, 128}}));
  const std::vector<Shape> bad = {{3, 64}, {128, 65}};
  EXPECT_EQ(mm->shape(bad, {}).status().code(), StatusCode::kInvalidArgument);

  const OpSchema* att = find_op_schema(op::kAttention);
  const std::vector<Shape> qkv = {{5, 8 * 64}, {100, 2 * 64}, {100, 2 * 32}};
  EXPECT_EQ(att->shape(qkv, {{"n_heads", 8}, {"n_kv_heads", 2}}).value(), (std::vector<Shape>{{5, 8 * 32}}));
  EXPECT_FALSE(att->shape(qkv, {{"n_heads", 8}, {"n_kv_heads", 3}}).is_ok());

  const OpSchema* router = find_op_schema(op::kMoeRouter);
  const std::vector<Shape> logits = {{4, 256}};
  EXPECT_EQ(router->shape(logits, {{"top_k", 8}}).value(), (std::vector<Shape>{{4, 8}, {4, 8}}));
  EXPECT_FALSE(router->shape(logits, {{"top_k", 300}}).is_ok());

  const OpSchema* glu = find_op_schema(op::kSwigluClamped);
  const std::vector<Shape> fused = {{2, 10}};
  EXPECT_EQ(glu->shape(fused, {{"interleaved", 1}}).value(), (std::vector<Shape>{{2, 5}}));
}

// The ops of hyper-connections, compressed attention and the grouped projection: shapes from the schema,
// and a mismatch refused.
TEST(OpSchema, ShapeFunctionsOfTheMechanismOps) {
  const auto shape = [](std::string_view op, std::vector<Shape> in, const OpAttributes& attrs) {
    return find_op_schema(op)->shape(in, attrs);
  };
  EXPECT_EQ(shape(op::kHcWeights, {{3, 24}}, {{"n_streams", 4}}).value(),
            (std::vector<Shape>{{3, 4}, {3, 4}, {3, 16}}));
  EXPECT_EQ(shape(op::kHcWeights, {{3, 4}}, {{"n_streams", 4}}).value(),
            (std::vector<Shape>{{3, 4}}));  // head
  EXPECT_FALSE(shape(op::kHcWeights, {{3, 20}}, {{"n_streams", 4}}).is_ok());
  EXPECT_EQ(shape(op::kHcCollapse, {{3, 4 * 64}, {3, 4}}, {{"n_streams", 4}}).value(),
            (std::vector<Shape>{{3, 64}}));
  EXPECT_FALSE(shape(op::kHcCollapse, {{3, 65}, {3, 4}}, {{"n_streams", 4}}).is_ok());
  EXPECT_EQ(shape(op::kHcExpand, {{3, 64}, {3, 256}}, {{"n_streams", 4}}).value(),
            (std::vector<Shape>{{3, 256}}));
  EXPECT_FALSE(shape(op::kHcExpand, {{3, 64}, {3, 255}}, {{"n_streams", 4}}).is_ok());
  EXPECT_EQ(shape(op::kKvCompress, {{12, 16}}, {{"ratio", 4}, {"overlap", 1}}).value(),
            (std::vector<Shape>{{3, 8}}));
  EXPECT_EQ(shape(op::kKvCompress, {{256, 16}}, {{"ratio", 128}}).value(), (std::vector<Shape>{{2, 16}}));
  EXPECT_FALSE(shape(op::kKvCompress, {{10, 16}}, {{"ratio", 4}}).is_ok());
  EXPECT_EQ(shape(op::kGroupedMatmul, {{5, 8 * 40}, {8 * 16, 40}}, {{"groups", 8}}).value(),
            (std::vector<Shape>{{5, 128}}));
  EXPECT_FALSE(shape(op::kGroupedMatmul, {{5, 8 * 40}, {8 * 16, 41}}, {{"groups", 8}}).is_ok());
}

TEST(RopeFrequencies, DefaultAndLinear) {
  RopeScaling s;
  const auto f = rope_frequencies(10000.0, 64, s, 4096).value();
  ASSERT_EQ(f.inv_freq.size(), 32u);
  EXPECT_FLOAT_EQ(f.inv_freq[0], 1.0f);
  EXPECT_NEAR(f.inv_freq[1], std::pow(10000.0, -2.0 / 64), 1e-7);
  s.type = RopeType::kLinear;
  s.factor = 4.0;
  EXPECT_NEAR(rope_frequencies(10000.0, 64, s, 4096)->inv_freq[1], std::pow(10000.0, -2.0 / 64) / 4, 1e-7);
  EXPECT_FALSE(rope_frequencies(10000.0, 63, s, 4096).is_ok());
  EXPECT_FALSE(rope_frequencies(-1.0, 64, s, 4096).is_ok());
}

TEST(RopeFrequencies, Llama3KeepsHighAndDividesLowFrequencies) {
  RopeScaling s{.type = RopeType::kLlama3,
                .factor = 8.0,
                .low_freq_factor = 1.0,
                .high_freq_factor = 4.0,
                .original_max_position = 8192};
  const auto base = rope_frequencies(500000.0, 128, RopeScaling{}, 131072).value();
  const auto f = rope_frequencies(500000.0, 128, s, 131072).value();
  EXPECT_FLOAT_EQ(f.inv_freq[0], base.inv_freq[0]);           // wavelength 2pi < 2048: unchanged
  EXPECT_FLOAT_EQ(f.inv_freq[63], base.inv_freq[63] / 8.0f);  // longest wavelengths: / factor
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_LE(f.inv_freq[i], base.inv_freq[i] * 1.0000001f);
    EXPECT_GE(f.inv_freq[i], base.inv_freq[i] / 8.0f * 0.9999999f);
  }
}

TEST(RopeFrequencies, YarnWorkedNumbersOfTheSpec) {
  // gpt-oss: b = 150000, D_r = 64, factor 32, O = 4096, truncate = false -> attention factor
  // 1 + 0.1 ln 32 = 1.346574 and a ramp between lo = 8.0928 and hi = 17.3980.
  RopeScaling s{.type = RopeType::kYarn, .factor = 32.0, .original_max_position = 4096, .truncate = false};
  const auto f = rope_frequencies(150000.0, 64, s, 131072).value();
  EXPECT_NEAR(f.attention_factor, 1.346574, 1e-6);
  const auto base = rope_frequencies(150000.0, 64, RopeScaling{}, 131072).value();
  EXPECT_FLOAT_EQ(f.inv_freq[8], base.inv_freq[8]);               // i <= lo: original frequency
  EXPECT_NEAR(f.inv_freq[18], base.inv_freq[18] / 32.0f, 1e-12);  // i >= hi: interpolated
  const double ramp12 = (12 - 8.0928) / (17.3980 - 8.0928);
  EXPECT_NEAR(f.inv_freq[12], (1 - ramp12) * base.inv_freq[12] + ramp12 * base.inv_freq[12] / 32,
              1e-4 * base.inv_freq[12]);
  // DeepSeek-V3: b = 1e4, O = 4096, factor 40, mscale = mscale_all_dim = 1: lo = 10, hi = 23, factor 1.
  RopeScaling ds{.type = RopeType::kYarn,
                 .factor = 40.0,
                 .original_max_position = 4096,
                 .mscale = 1.0,
                 .mscale_all_dim = 1.0};
  const auto g = rope_frequencies(10000.0, 64, ds, 163840).value();
  const auto gb = rope_frequencies(10000.0, 64, RopeScaling{}, 163840).value();
  EXPECT_FLOAT_EQ(g.attention_factor, 1.0f);
  EXPECT_FLOAT_EQ(g.inv_freq[10], gb.inv_freq[10]);
  EXPECT_NEAR(g.inv_freq[11], (1 - 1.0 / 13) * gb.inv_freq[11] + (1.0 / 13) * gb.inv_freq[11] / 40, 1e-9);
  EXPECT_NEAR(g.inv_freq[23], gb.inv_freq[23] / 40, 1e-12);
  EXPECT_NEAR(yarn_get_mscale(40.0, 1.0), 1.0 + 0.1 * std::log(40.0), 1e-12);
}

TEST(RopeFrequencies, DynamicGrowsOnlyPastTheTrainedLength) {
  RopeScaling s{.type = RopeType::kDynamic, .factor = 2.0};
  const auto short_seq = rope_frequencies(10000.0, 64, s, 2048, 1000).value();
  const auto long_seq = rope_frequencies(10000.0, 64, s, 2048, 8192).value();
  const auto base = rope_frequencies(10000.0, 64, RopeScaling{}, 2048).value();
  EXPECT_EQ(short_seq.inv_freq, base.inv_freq);
  const double new_base = 10000.0 * std::pow(2.0 * 8192 / 2048 - 1.0, 64.0 / 62.0);
  EXPECT_NEAR(long_seq.inv_freq[1], std::pow(new_base, -2.0 / 64), 1e-7);
}

// The decode row dots' prefetch distance: DAY0_PREFETCH_BYTES when it is a whole number in [0, 65536],
// else none on AMD and 2 KiB elsewhere; what the process uses is one of those.
TEST(SimdLevels, PrefetchDistanceFollowsTheVendorUnlessTold) {
  EXPECT_EQ(software_prefetch_bytes_for(nullptr, "AuthenticAMD"), 0);
  EXPECT_EQ(software_prefetch_bytes_for(nullptr, "GenuineIntel"), 2048);
  EXPECT_EQ(software_prefetch_bytes_for(nullptr, ""), 2048);  // CPUID said nothing
  EXPECT_EQ(software_prefetch_bytes_for("4096", "AuthenticAMD"), 4096);
  EXPECT_EQ(software_prefetch_bytes_for("0", "GenuineIntel"), 0);
  EXPECT_EQ(software_prefetch_bytes_for("65536", "GenuineIntel"), 65536);
  for (const char* ignored : {"", "-1", "65537", "2k", " 64", "99999999999999999999999"}) {
    EXPECT_EQ(software_prefetch_bytes_for(ignored, "AuthenticAMD"), 0) << ignored;
    EXPECT_EQ(software_prefetch_bytes_for(ignored, "GenuineIntel"), 2048) << ignored;
  }
  const int64_t used = software_prefetch_bytes();
  EXPECT_TRUE(used >= 0 && used <= 65536) << used;
}

// Probe and bench memory: 2 MiB aligned (where a huge page can back it), every byte usable.
TEST(SimdLevels, HugePageAllocationsAreAlignedAndUsable) {
  std::vector<double, HugePageAllocator<double>> v(300000, 1.5);  // 2.3 MB: two 2 MiB units
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (uintptr_t{2} << 20), 0u);
  v.back() = 2.5;
  double sum = 0;
  for (double d : v) sum += d;
  EXPECT_EQ(sum, 1.5 * 299999 + 2.5);
}

TEST(SimdLevels, ParseAndDetect) {
  EXPECT_EQ(parse_simd_level("avx2"), SimdLevel::kAvx2);
  EXPECT_FALSE(parse_simd_level("sse9").has_value());
  const auto levels = available_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), SimdLevel::kScalar);
  EXPECT_EQ(levels.back(), detected_simd_level());
  EXPECT_EQ(parse_simd_level("amx"), SimdLevel::kAmx);
  EXPECT_STREQ(simd_level_name(SimdLevel::kAmx), "amx");
}

// Every level's to_bf16 is f32_to_bf16 bit for bit on what activations hold: ties to even, both signs,
// infinities, NaN (kept NaN), and lengths that leave a scalar tail.
TEST(SimdLevels, ToBf16MatchesTheScalarRoundingAtEveryLevel) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               1e30f,
                               -3e-30f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               65504.0f,
                               3.4e38f};
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0xbf808000u, 0x7f7fffffu, 0x7f800001u, 0xffc00001u}) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    values.push_back(f);
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 10.0f);
  for (int i = 0; i < 1000; ++i) values.push_back(dist(rng));
  for (SimdLevel level : available_simd_levels()) {
    std::vector<uint16_t> got(values.size());
    cpu::kernels_for(level).to_bf16(values.data(), static_cast<int64_t>(values.size()), got.data());
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t want = f32_to_bf16(values[i]);
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(bf16_to_f32(got[i]))) << simd_level_name(level) << " value " << i;
      } else {
        EXPECT_EQ(got[i], want) << simd_level_name(level) << " value " << i << " = " << values[i];
      }
    }
  }
}

// Only the amx level's table has the tile GEMM, and it is the top level exactly where the CPU and the OS
// allow tiles (the differential tests then run it against the reference backend).
TEST(SimdLevels, AmxTileGemmOnlyAtTheAmxLevel) {
  // Only the tables of levels this CPU runs can be built here (each is built by code of its level); a
  // level above them is refused with an error, not an illegal instruction.
  for (SimdLevel level : available_simd_levels()) {
    EXPECT_EQ(cpu::kernels_for(level).level, level) << simd_level_name(level);
    EXPECT_EQ(cpu::kernels_for(level).gemm_bf16_amx != nullptr, level == SimdLevel::kAmx)
        << simd_level_name(level);
  }
  if (detected_simd_level() != SimdLevel::kAmx) {
    const SimdLevel above = static_cast<SimdLevel>(static_cast<int>(detected_simd_level()) + 1);
    EXPECT_THROW(cpu::kernels_for(above), InternalError) << simd_level_name(above);
  }
  EXPECT_EQ(detected_simd_level() == SimdLevel::kAmx, cpu_has_amx_bf16());
  if (!cpu_has_amx_bf16())
    GTEST_SKIP() << "this CPU (or its OS) has no AMX tiles: the amx level is not run here";
  EXPECT_TRUE(cpu_has_avx512_bf16());
}

TEST(ThreadPool, CoversEveryIndexOnceAndNestsSafely) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  std::atomic<int> inner{0};
  pool.run([&](int) {
    pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); });
  });
  EXPECT_EQ(inner.load(), 30);
}

}  // namespace
}  // namespace day0

namespace day0 {
namespace {

// A throw inside a job (on a worker or on the caller) is rethrown by the call after every thread has
// finished; the pool keeps working afterwards.
TEST(ThreadPool, AThrowInsideAJobBecomesTheCallersException) {
  ThreadPool pool(3);
  for (int thrower : {0, 1, 2}) {
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.run([&](int t) {
      if (t == thrower) throw std::bad_alloc();
      ++finished;
    }),
                 std::bad_alloc)
        << "thread " << thrower;
    EXPECT_EQ(finished.load(), 2);  // the others ran to the end before the call returned
  }
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [&](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

// Workers spin between jobs for a budget, then sleep: back-to-back jobs (handed over while spinning)
// and jobs after a pause longer than the budget (workers asleep, woken by the condition variable) both
// run every index exactly once, for the default budget and for 0 (always sleep).
TEST(ThreadPool, SpinningAndSleepingHandoffsRunEveryJobOnce) {
  const char* saved = std::getenv("DAY0_SPIN_US");
  const std::string restore = saved != nullptr ? saved : "";
  for (const char* spin : {"0", "100", "2000"}) {
    setenv("DAY0_SPIN_US", spin, 1);
    ThreadPool pool(3);
    std::atomic<int64_t> calls{0};
    for (int i = 0; i < 20000; ++i) pool.run([&](int t) { calls += t + 1; });
    EXPECT_EQ(calls.load(), 20000 * 6) << "spin " << spin;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past every budget above
      std::atomic<int> ran{0};
      pool.run([&](int) { ++ran; });
      EXPECT_EQ(ran.load(), 3) << "spin " << spin;
    }
  }
  if (saved != nullptr) {
    setenv("DAY0_SPIN_US", restore.c_str(), 1);
  } else {
    unsetenv("DAY0_SPIN_US");
  }
}

TEST(ThreadPool, SpinBudgetComesFromTheEnvironmentWithinItsRange) {
  const char* saved = std::getenv("DAY0_SPIN_US");
  const std::string restore = saved != nullptr ? saved : "";
  setenv("DAY0_SPIN_US", "250", 1);
  EXPECT_EQ(default_spin_micros(), 250);
  setenv("DAY0_SPIN_US", "0", 1);
  EXPECT_EQ(default_spin_micros(), 0);
  for (const char* bad : {"-1", "100001", "12us", ""}) {
    setenv("DAY0_SPIN_US", bad, 1);
    EXPECT_EQ(default_spin_micros(), kDefaultSpinMicros) << bad;
  }
  if (saved != nullptr) {
    setenv("DAY0_SPIN_US", restore.c_str(), 1);
  } else {
    unsetenv("DAY0_SPIN_US");
  }
}

}  // namespace
}  // namespace day0
