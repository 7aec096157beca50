#include "day0/runtime/speed_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/model/model_memory.h"
#include "day0/runtime/generate.h"

namespace day0 {

namespace {

using Clock = std::chrono::steady_clock;

double elapsed_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct RunTiming {
  double seconds = 0;  // the test's whole run
  double ttft = 0;     // pp: forward + first pick
  int64_t forward_calls = 0;
};

// pp: the prompt in one forward call into an empty cache, then the pick of the first token.
Result<RunTiming> run_prompt(Engine& engine, const std::vector<int32_t>& prompt) {
  KvCache cache = engine.new_cache();
  const SequenceStep step{&cache, prompt};
  const auto t0 = Clock::now();
  D0_ASSIGN_OR_RETURN(ConstMatrix logits, engine.forward(std::span(&step, 1), /*last_only=*/true));
  const double forward_seconds = elapsed_since(t0);
  pick_token(engine.backend(), logits.row_span(0), SamplingParams{}, 0);
  return RunTiming{forward_seconds, elapsed_since(t0), 1};
}

// tg: `tokens` forward calls of one token each from an empty cache, each feeding the previous pick
// (the first feeds `first`), as llama-bench's generation test does.
Result<RunTiming> run_generate(Engine& engine, int64_t tokens, int32_t first) {
  KvCache cache = engine.new_cache();
  int32_t token = first;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < tokens; ++i) {
    const SequenceStep step{&cache, std::span(&token, 1)};
    D0_ASSIGN_OR_RETURN(ConstMatrix logits, engine.forward(std::span(&step, 1), /*last_only=*/true));
    token = pick_token(engine.backend(), logits.row_span(0), SamplingParams{}, i);
  }
  return RunTiming{elapsed_since(t0), 0, tokens};
}

// The peaks of the units prefill may run on, and the one its matmuls of `prompt_rows` rows do run on
// (the backend's answer, from the rule that picks the kernel).
MachineLimits measure_limits(Engine& engine, WeightFormat weights, int threads, int64_t prompt_rows) {
  MachineLimits m;
  m.measured = true;
  m.threads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(m.threads);
  {
    BandwidthProbe probe;  // its arrays are freed before the peak loops run
    m.read_gbps = probe.read_gbps(pool, 3);
  }
  m.fma_gflops = measure_fma_peak_gflops(pool);
  m.bf16_gflops = measure_bf16_peak_gflops(pool);
  m.amx_bf16_gflops = measure_amx_bf16_peak_gflops(pool);
  const bool exact = engine.options().precision != ActivationPrecision::kBF16;  // as the blocks' matmuls
  const ComputeUnit unit = engine.backend().matmul_unit(weights, exact, prompt_rows);
  if (unit == ComputeUnit::kFp32FmaAvx2) m.fma_avx2_gflops = measure_fma_avx2_peak_gflops(pool);
  if (unit == ComputeUnit::kInt8Avx512Vnni) m.int8_vnni_gops = measure_int8_vnni_peak_gops(pool);
  if (unit == ComputeUnit::kAmxInt8) m.amx_int8_gops = measure_amx_int8_peak_gops(pool);
  select_prefill_peak(unit, m);
  return m;
}

}  // namespace

void select_prefill_peak(ComputeUnit unit, MachineLimits& m) {
  m.prefill_unit = unit;
  m.prefill_peak_name = compute_unit_name(unit);
  switch (unit) {
    case ComputeUnit::kFp32Fma:
      m.prefill_peak_gflops = m.fma_gflops;
      break;
    case ComputeUnit::kFp32FmaAvx2:
      m.prefill_peak_gflops = m.fma_avx2_gflops;
      break;
    case ComputeUnit::kBf16Dot:
      m.prefill_peak_gflops = m.bf16_gflops;
      break;
    case ComputeUnit::kAmxBf16:
      m.prefill_peak_gflops = m.amx_bf16_gflops;
      break;
    case ComputeUnit::kInt8Avx512Vnni:
      m.prefill_peak_gflops = m.int8_vnni_gops;
      break;
    case ComputeUnit::kAmxInt8:
      m.prefill_peak_gflops = m.amx_int8_gops;
      break;
    default:  // no peak loop for this unit: no limit rather than another unit's
      m.prefill_peak_gflops = 0;
      break;
  }
}

std::pair<double, double> mean_and_stdev(const std::vector<double>& v) {
  if (v.empty()) return {0.0, 0.0};
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  if (v.size() < 2) return {mean, 0.0};
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / static_cast<double>(v.size() - 1))};
}

Result<SpeedBenchResult> run_speed_bench(Engine& engine, const SpeedBenchOptions& options) {
  const ModelSpec& spec = engine.spec();
  if (options.repetitions < 1)
    return invalid_argument(fmt::format("repetitions must be at least 1, got {}", options.repetitions));
  if (options.prompt_tokens.empty() && options.gen_tokens.empty())
    return invalid_argument("no test: give at least one prompt (pp) or generation (tg) length");
  const int64_t context = spec.max_position_embeddings;
  for (const auto* list : {&options.prompt_tokens, &options.gen_tokens}) {
    for (int64_t n : *list) {
      const char* what = list == &options.prompt_tokens ? "prompt" : "generation";
      if (n < 1) return invalid_argument(fmt::format("{} length must be at least 1, got {}", what, n));
      if (context > 0 && n > context) {
        return invalid_argument(fmt::format(
            "{} length {} exceeds the model's context (max_position_embeddings {})", what, n, context));
      }
    }
  }

  SpeedBenchResult result;
  const ModelSpec& weights_spec = options.stored_spec != nullptr ? *options.stored_spec : spec;
  const ActivatedWeights activated = activated_weights_per_token(weights_spec);
  result.weight_bytes_per_token = activated.bytes;
  result.matmul_flops_per_token = 2.0 * activated.matmul_params;

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> token(
      0, static_cast<int32_t>(std::max<int64_t>(1, spec.vocab_size) - 1));
  auto run_test = [&](SpeedTestKind kind, int64_t n) -> Status {
    SpeedTestResult t;
    t.kind = kind;
    t.tokens = n;
    t.name = fmt::format("{}{}", kind == SpeedTestKind::kPrompt ? "pp" : "tg", n);
    std::vector<int32_t> prompt(static_cast<size_t>(kind == SpeedTestKind::kPrompt ? n : 1));
    for (auto& id : prompt) id = token(rng);
    std::vector<double> ttfts;
    for (int run = 0; run <= options.repetitions; ++run) {  // run 0: the warm-up
      if (options.progress) options.progress(t.name, run, options.repetitions);
      auto timing =
          kind == SpeedTestKind::kPrompt ? run_prompt(engine, prompt) : run_generate(engine, n, prompt[0]);
      if (!timing.is_ok()) return timing.status().with_context(t.name);
      if (run == 0) continue;
      t.seconds.push_back(timing->seconds);
      t.tok_s.push_back(timing->seconds > 0 ? static_cast<double>(n) / timing->seconds : 0.0);
      t.forward_calls += timing->forward_calls;
      if (kind == SpeedTestKind::kPrompt) ttfts.push_back(timing->ttft);
    }
    std::tie(t.mean_tok_s, t.stdev_tok_s) = mean_and_stdev(t.tok_s);
    t.mean_ttft_seconds = mean_and_stdev(ttfts).first;
    result.tests.push_back(std::move(t));
    return Status::ok();
  };
  for (int64_t n : options.prompt_tokens) D0_RETURN_IF_ERROR(run_test(SpeedTestKind::kPrompt, n));
  for (int64_t n : options.gen_tokens) D0_RETURN_IF_ERROR(run_test(SpeedTestKind::kGenerate, n));

  // After the tests, so that the probes' gigabyte of arrays never shares memory with the run.
  if (options.measure_limits) {
    const int64_t longest_prompt =
        options.prompt_tokens.empty()
            ? 1
            : *std::max_element(options.prompt_tokens.begin(), options.prompt_tokens.end());
    result.limits = measure_limits(engine, weights_spec.weights.projection_format(), options.limit_threads,
                                   longest_prompt);
    for (auto& t : result.tests) {
      if (t.kind == SpeedTestKind::kPrompt) {
        t.limit_tok_s = result.matmul_flops_per_token > 0
                            ? result.limits.prefill_peak_gflops * 1e9 / result.matmul_flops_per_token
                            : 0.0;
      } else {
        t.limit_tok_s = result.weight_bytes_per_token > 0
                            ? result.limits.read_gbps * 1e9 / result.weight_bytes_per_token
                            : 0.0;
      }
      t.share_of_limit = t.limit_tok_s > 0 ? t.mean_tok_s / t.limit_tok_s : 0.0;
    }
  }
  return result;
}

}  // namespace day0
