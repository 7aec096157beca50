// run_speed_bench on a golden miniature: the tests run what they say (forward calls, tokens), the
// figures follow from the samples, every cache is given back, bad lengths are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "day0/backends/cpu/simd_level.h"
#include "day0/model/model_memory.h"
#include "day0/runtime/speed_bench.h"
#include "golden.h"

namespace day0::testing {
namespace {

TEST(SpeedBench, MeanAndSampleStdev) {
  EXPECT_EQ(mean_and_stdev({}), std::make_pair(0.0, 0.0));
  EXPECT_EQ(mean_and_stdev({3.0}), std::make_pair(3.0, 0.0));
  const auto [mean, stdev] = mean_and_stdev({2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0});
  EXPECT_DOUBLE_EQ(mean, 5.0);
  EXPECT_NEAR(stdev, std::sqrt(32.0 / 7.0), 1e-12);  // n - 1 in the denominator, as llama-bench
}

TEST(SpeedBench, RunsEachTestAsAskedAndGivesEveryBlockBack) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  SpeedBenchOptions o;
  o.prompt_tokens = {5, 12};
  o.gen_tokens = {7};
  o.repetitions = 3;
  o.measure_limits = false;
  std::vector<std::string> seen;
  o.progress = [&](const std::string& test, int r, int runs) {
    EXPECT_EQ(runs, 3);
    seen.push_back(test + "/" + std::to_string(r));
  };
  auto r = run_speed_bench(*run->engine, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->tests.size(), 3u);
  EXPECT_EQ(seen, (std::vector<std::string>{"pp5/0", "pp5/1", "pp5/2", "pp5/3", "pp12/0", "pp12/1", "pp12/2",
                                            "pp12/3", "tg7/0", "tg7/1", "tg7/2", "tg7/3"}));
  const std::vector<std::pair<std::string, int64_t>> want = {{"pp5", 3}, {"pp12", 3}, {"tg7", 21}};
  for (size_t i = 0; i < want.size(); ++i) {
    const SpeedTestResult& t = r->tests[i];
    EXPECT_EQ(t.name, want[i].first);
    EXPECT_EQ(t.forward_calls, want[i].second) << t.name;  // pp: one call a run; tg: one a token
    ASSERT_EQ(t.seconds.size(), 3u);
    ASSERT_EQ(t.tok_s.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_GT(t.seconds[k], 0.0);
      EXPECT_DOUBLE_EQ(t.tok_s[k], static_cast<double>(t.tokens) / t.seconds[k]);
    }
    const auto [mean, stdev] = mean_and_stdev(t.tok_s);
    EXPECT_DOUBLE_EQ(t.mean_tok_s, mean);
    EXPECT_DOUBLE_EQ(t.stdev_tok_s, stdev);
    if (t.kind == SpeedTestKind::kPrompt) {
      // TTFT is the forward call plus the first pick: never shorter than the forward call alone.
      EXPECT_GE(t.mean_ttft_seconds, mean_and_stdev(t.seconds).first);
    } else {
      EXPECT_EQ(t.mean_ttft_seconds, 0.0);
    }
    EXPECT_EQ(t.share_of_limit, 0.0);  // limits not measured
  }
  EXPECT_FALSE(r->limits.measured);
  EXPECT_EQ(run->engine->kv_pool().stats().blocks_allocated, 0);
  const ActivatedWeights a = activated_weights_per_token(run->engine->spec());
  EXPECT_EQ(r->weight_bytes_per_token, a.bytes);
  EXPECT_EQ(r->matmul_flops_per_token, 2.0 * a.matmul_params);
}

TEST(SpeedBench, LimitsGiveEachTestItsCeiling) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  SpeedBenchOptions o;
  o.prompt_tokens = {4};
  o.gen_tokens = {2};
  o.repetitions = 1;
  o.limit_threads = 1;
  auto r = run_speed_bench(*run->engine, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->limits.measured);
  EXPECT_GT(r->limits.read_gbps, 0.0);
  EXPECT_GT(r->limits.fma_gflops, 0.0);
  // The engine runs float32 activations: FP32 FMA, on 256 bits where the widest level is avx2.
  const auto level = default_simd_level();  // the engine's backend level (DAY0_SIMD, else detected)
  ASSERT_TRUE(level.is_ok());
  const bool avx2 = *level == SimdLevel::kAvx2;
  EXPECT_EQ(r->limits.prefill_unit, avx2 ? ComputeUnit::kFp32FmaAvx2 : ComputeUnit::kFp32Fma);
  const double fma = avx2 ? r->limits.fma_avx2_gflops : r->limits.fma_gflops;
  EXPECT_GT(fma, 0.0);
  EXPECT_EQ(r->limits.prefill_peak_gflops, fma);
  const SpeedTestResult& pp = r->tests[0];
  const SpeedTestResult& tg = r->tests[1];
  EXPECT_DOUBLE_EQ(pp.limit_tok_s, fma * 1e9 / r->matmul_flops_per_token);
  EXPECT_DOUBLE_EQ(tg.limit_tok_s, r->limits.read_gbps * 1e9 / r->weight_bytes_per_token);
  EXPECT_DOUBLE_EQ(pp.share_of_limit, pp.mean_tok_s / pp.limit_tok_s);
  EXPECT_DOUBLE_EQ(tg.share_of_limit, tg.mean_tok_s / tg.limit_tok_s);
}

// The prefill limit is the peak of the unit the backend says the prompt's matmuls run on, and AMX only
// where this CPU has it: a BF16 miniature with BF16 activations and a prompt past the decode-sized rows.
TEST(SpeedBench, PrefillLimitIsThePeakOfTheUnitTheMatmulsRunOn) {
  EngineOptions eo;
  eo.precision = ActivationPrecision::kBF16;
  auto run = open_golden("llama3", "cpu", eo);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_EQ(run->engine->spec().weights.format, WeightFormat::kBF16);
  SpeedBenchOptions o;
  o.prompt_tokens = {8, 160};  // the longest one names the unit
  o.gen_tokens = {};
  o.repetitions = 1;
  o.limit_threads = 1;
  auto r = run_speed_bench(*run->engine, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ComputeUnit unit = run->engine->backend().matmul_unit(WeightFormat::kBF16, /*exact=*/false, 160);
  EXPECT_EQ(r->limits.prefill_unit, unit);
  EXPECT_EQ(r->limits.prefill_peak_name, compute_unit_name(unit));
  // AMX where the backend's level has the tiles (DAY0_SIMD may hold it below what the CPU has).
  const auto level = default_simd_level();
  ASSERT_TRUE(level.is_ok());
  EXPECT_EQ(unit == ComputeUnit::kAmxBf16, *level == SimdLevel::kAmx);
  EXPECT_EQ(r->limits.amx_bf16_gflops > 0, cpu_has_amx_bf16());
  if (unit == ComputeUnit::kAmxBf16) {
    EXPECT_EQ(r->limits.prefill_peak_gflops, r->limits.amx_bf16_gflops);
  }
  EXPECT_GT(r->limits.prefill_peak_gflops, 0.0);
  for (const SpeedTestResult& t : r->tests) {
    EXPECT_DOUBLE_EQ(t.limit_tok_s, r->limits.prefill_peak_gflops * 1e9 / r->matmul_flops_per_token)
        << t.name;
  }
}

// A checkpoint whose packed INT4 codes the integer kernels read: the bytes a token reads and the unit
// of prefill come from the checkpoint's own spec (stored_spec), not from the dequantized one the engine
// computes with.
TEST(SpeedBench, PackedIntegerWeightsCountTheirOwnBytesAndUnit) {
  EngineOptions eo;
  eo.precision = ActivationPrecision::kBF16;
  auto run = open_golden("llama3", "cpu", eo);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ModelSpec stored = run->engine->spec();
  stored.weights.packed.bits = 4;
  stored.weights.packed.group_size = 32;
  stored.weights.packed.targets = {"Linear"};
  stored.weights.packed.ignore = {"lm_head"};
  ASSERT_EQ(stored.weights.projection_format(), WeightFormat::kInt4);
  SpeedBenchOptions o;
  o.prompt_tokens = {160};
  o.gen_tokens = {2};
  o.repetitions = 1;
  o.limit_threads = 1;
  o.stored_spec = &stored;
  auto r = run_speed_bench(*run->engine, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const double packed_bytes = activated_weights_per_token(stored).bytes;
  EXPECT_DOUBLE_EQ(r->weight_bytes_per_token, packed_bytes);
  EXPECT_LT(packed_bytes, activated_weights_per_token(run->engine->spec()).bytes);
  EXPECT_EQ(r->limits.prefill_unit, run->engine->backend().matmul_unit(WeightFormat::kInt4, false, 160));
  if (r->limits.prefill_unit == ComputeUnit::kAmxInt8) {
    EXPECT_GT(r->limits.amx_int8_gops, 0.0);
    EXPECT_EQ(r->limits.prefill_peak_gflops, r->limits.amx_int8_gops);
  }
}

TEST(SpeedBench, SelectPrefillPeakTakesTheUnitsOwnPeakOrNone) {
  MachineLimits m;
  m.fma_gflops = 100;
  m.fma_avx2_gflops = 60;
  m.bf16_gflops = 150;
  m.amx_bf16_gflops = 900;
  m.int8_vnni_gops = 300;
  m.amx_int8_gops = 1800;
  const std::pair<ComputeUnit, double> want[] = {
      {ComputeUnit::kFp32Fma, 100},  {ComputeUnit::kFp32FmaAvx2, 60},     {ComputeUnit::kBf16Dot, 150},
      {ComputeUnit::kAmxBf16, 900},  {ComputeUnit::kInt8Avx512Vnni, 300}, {ComputeUnit::kInt8Dot, 0},
      {ComputeUnit::kAmxInt8, 1800}, {ComputeUnit::kScalar, 0},           {ComputeUnit::kUnknown, 0}};
  for (const auto& [unit, peak] : want) {
    select_prefill_peak(unit, m);
    EXPECT_EQ(m.prefill_unit, unit);
    EXPECT_EQ(m.prefill_peak_gflops, peak) << compute_unit_name(unit);
    EXPECT_EQ(m.prefill_peak_name, compute_unit_name(unit));
  }
}

TEST(SpeedBench, RefusesLengthsItCannotRun) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const int64_t context = run->engine->spec().max_position_embeddings;
  ASSERT_GT(context, 0);
  SpeedBenchOptions o;
  o.measure_limits = false;
  o.repetitions = 1;
  auto refused = [&](std::vector<int64_t> pp, std::vector<int64_t> tg, int reps, const std::string& says) {
    o.prompt_tokens = std::move(pp);
    o.gen_tokens = std::move(tg);
    o.repetitions = reps;
    auto r = run_speed_bench(*run->engine, o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  };
  refused({0}, {}, 1, "prompt length must be at least 1, got 0");
  refused({}, {-3}, 1, "generation length must be at least 1, got -3");
  refused({context + 1}, {}, 1, "exceeds the model's context");
  refused({}, {}, 1, "no test");
  refused({4}, {}, 0, "repetitions must be at least 1");
  EXPECT_EQ(run->engine->kv_pool().stats().blocks_allocated, 0);
}

}  // namespace
}  // namespace day0::testing
