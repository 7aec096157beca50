#pragma once
// `day0 bench MODEL`: llama-bench's tests on any checkpoint, through the engine every other command
// runs, with the machine's limits measured in the same run beside them.
//   pp N  a prompt of N tokens pre-filled into an empty cache in one forward call (prefill tok/s);
//         its time plus the first pick is the time to first token (TTFT) of an N-token prompt
//   tg N  N tokens decoded one forward call each, from an empty cache (decode tok/s)
// Each test runs once to warm up (page faults, the pool's first hand-offs), then `repetitions` times;
// tok/s is reported as the mean and the sample standard deviation over the repetitions, as llama-bench
// prints "t/s avg ± stdev".
// Limits: decode reads every activated weight once a token, so its ceiling is the read bandwidth over
// those bytes (the roofline); prefill multiplies by them, 2 FLOPs a parameter a token, against the
// arithmetic peak of the unit the backend says its matmuls of the longest prompt run on
// (Backend::matmul_unit: AMX BF16 tiles, vdpbf16ps, FP32 FMA at the backend's width, AVX-512 VNNI). A unit
// with no peak loop (scalar, int8 dots without AVX-512 VNNI) gets no prefill limit.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "day0/runtime/engine.h"

namespace day0 {

enum class SpeedTestKind { kPrompt, kGenerate };

struct SpeedBenchOptions {
  std::vector<int64_t> prompt_tokens{512};  // one pp test each
  std::vector<int64_t> gen_tokens{128};     // one tg test each
  int repetitions = 5;                      // measured runs of each test, after one warm-up
  uint64_t seed = 0;                        // of the random prompt tokens
  bool measure_limits = true;               // bandwidth and peak probes (a few seconds, ~0.5-2 GiB)
  int limit_threads = 0;                    // threads of the probes: the engine's (0: all cores)
  // When the engine runs the integer kernels on the checkpoint's packed codes: the checkpoint's own spec
  // (LoadedModel::stored_spec), whose tensors give the bytes a token reads and whose format the unit of
  // prefill's matmuls. Null: engine.spec().
  const ModelSpec* stored_spec = nullptr;
  // Called before each run: ("pp512", 2, 5) for the second of five measured runs, 0 for the warm-up.
  std::function<void(const std::string& test, int run, int runs)> progress;
};

struct SpeedTestResult {
  std::string name;  // "pp512", "tg128"
  SpeedTestKind kind = SpeedTestKind::kPrompt;
  int64_t tokens = 0;
  std::vector<double> seconds;  // each measured run
  std::vector<double> tok_s;    // tokens / seconds of each run
  double mean_tok_s = 0;
  double stdev_tok_s = 0;        // sample standard deviation (0 for one run)
  double mean_ttft_seconds = 0;  // pp: forward + the first pick
  int64_t forward_calls = 0;     // in the measured runs: pp 1 a run, tg `tokens` a run
  double share_of_limit = 0;     // mean tok/s over the limit below (0 when not measured)
  double limit_tok_s = 0;        // pp: peak FLOP/s / FLOPs a token; tg: bandwidth / bytes a token
};

struct MachineLimits {
  bool measured = false;
  int threads = 0;
  double read_gbps = 0;                              // read bandwidth (best of 3 passes)
  double fma_gflops = 0;                             // FP32 FMA peak at the CPU's widest level
  double fma_avx2_gflops = 0;                        // on 256 bits, measured only when prefill runs on it
  double bf16_gflops = 0;                            // vdpbf16ps peak (0 without AVX-512 BF16)
  double amx_bf16_gflops = 0;                        // TDPBF16PS peak on AMX tiles (0 without AMX)
  double int8_vnni_gops = 0;                         // vpdpbusd peak, measured only when prefill runs on it
  double amx_int8_gops = 0;                          // TDPBSSD peak, measured only when prefill runs on it
  ComputeUnit prefill_unit = ComputeUnit::kUnknown;  // what prefill's matmuls run on (see above)
  double prefill_peak_gflops = 0;                    // that unit's peak; 0: no peak loop for it
  std::string prefill_peak_name;                     // compute_unit_name(prefill_unit)
};

// Sets the prefill unit, its name and its peak from the peaks already in `m` (0 for a unit without one).
void select_prefill_peak(ComputeUnit unit, MachineLimits& m);

struct SpeedBenchResult {
  std::vector<SpeedTestResult> tests;  // pp tests, then tg tests, in the order asked
  double weight_bytes_per_token = 0;   // activated_weights_per_token().bytes
  double matmul_flops_per_token = 0;   // 2 x activated matmul parameters
  MachineLimits limits;
};

// InvalidArgument for a test length below 1 or above the model's context, repetitions below 1, or no
// test at all; the engine's error when a forward call fails. Every cache is released before it returns.
Result<SpeedBenchResult> run_speed_bench(Engine& engine, const SpeedBenchOptions& options);

// Mean and sample standard deviation of `v` (0, 0 when empty; stdev 0 for one value).
std::pair<double, double> mean_and_stdev(const std::vector<double>& v);

}  // namespace day0
