// One MoE layer on the cpu backend: router matmul, DeepSeek-style sigmoid top-8 of 256 experts, and
// the routed experts (hidden 1024, expert width 512, BF16 and FP8 weights) at batch 1, 16 (a serving
// step of 16 streams: a few tokens per expert) and 64.
// Reports tokens/s and GB/s of the expert weights the batch actually touched. Args: format, batch.
// BM_MoeServeStep and BM_MoeDecodeStepFromMemory: bench-moe-a02b's experts (64, top-8) in a serving step.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <benchmark/benchmark.h>

#include "bench_weights.h"
#include "day0/backends/backend.h"
#include "day0/backends/thread_pool.h"

namespace {

constexpr int64_t kExperts = 256;
constexpr int64_t kTopK = 8;
constexpr int64_t kHidden = 1024;
constexpr int64_t kInter = 512;

void BM_MoeLayer(benchmark::State& state) {
  const auto format = state.range(0) == 0 ? day0::WeightFormat::kBF16 : day0::WeightFormat::kFp8Block;
  const int64_t batch = state.range(1);
  std::vector<day0::bench::OwnedWeight> store;
  store.reserve(3 * kExperts + 1);
  std::vector<day0::ExpertWeights> experts(kExperts);
  for (int64_t e = 0; e < kExperts; ++e) {
    store.push_back(day0::bench::make_weight(format, kInter, kHidden, 3 * e));
    experts[static_cast<size_t>(e)].gate = store.back().view;
    store.push_back(day0::bench::make_weight(format, kInter, kHidden, 3 * e + 1));
    experts[static_cast<size_t>(e)].up = store.back().view;
    store.push_back(day0::bench::make_weight(format, kHidden, kInter, 3 * e + 2));
    experts[static_cast<size_t>(e)].down = store.back().view;
  }
  store.push_back(day0::bench::make_weight(day0::WeightFormat::kBF16, kExperts, kHidden, 9999));
  const day0::WeightView router = store.back().view;
  const auto bias = day0::bench::make_activations(kExperts, 5);
  const auto x = day0::bench::make_activations(batch * kHidden, 6);
  std::vector<float> logits(static_cast<size_t>(batch * kExperts));
  std::vector<int32_t> ids(static_cast<size_t>(batch * kTopK));
  std::vector<float> weights(ids.size());
  std::vector<float> out(static_cast<size_t>(batch * kHidden));
  day0::BackendOptions opts;
  opts.n_threads = 2;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  double touched_bytes = 0;
  for (auto _ : state) {
    be->matmul({.x = {x.data(), batch, kHidden}, .w = router, .y = {logits.data(), batch, kExperts}});
    be->moe_router({.logits = {logits.data(), batch, kExperts},
                    .correction_bias = bias,
                    .scoring = day0::RouterScoring::kSigmoid,
                    .method = day0::TopkMethod::kNoauxTc,
                    .top_k = kTopK,
                    .n_group = 8,
                    .topk_group = 4,
                    .norm_topk_prob = true,
                    .renorm_eps = 1e-20f,
                    .routed_scaling_factor = 2.5f,
                    .expert_ids = {ids.data(), batch, kTopK},
                    .expert_weights = {weights.data(), batch, kTopK}});
    be->moe_experts({.x = {x.data(), batch, kHidden},
                     .expert_ids = {ids.data(), batch, kTopK},
                     .expert_weights = {weights.data(), batch, kTopK},
                     .experts = experts,
                     .out = {out.data(), batch, kHidden}});
    benchmark::DoNotOptimize(out.data());
    const std::set<int32_t> unique(ids.begin(), ids.end());
    const auto& ew = experts[0];
    touched_bytes += static_cast<double>(unique.size()) *
                     static_cast<double>(ew.gate.data_bytes() + ew.up.data_bytes() + ew.down.data_bytes());
  }
  state.SetLabel(day0::weight_format_name(format));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["expert_GB/s"] = benchmark::Counter(touched_bytes / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MoeLayer)->ArgsProduct({{0, 1}, {1, 16, 64}})->UseRealTime()->Unit(benchmark::kMillisecond);

constexpr int64_t kServeExperts = 64;  // bench-moe-a02b: experts a layer

// One bench-moe-a02b layer's experts (BF16 gate, up, down), their weights kept in `store` (reserved by the
// caller), seeds seed0 + 3 e + 0..2.
std::vector<day0::ExpertWeights> make_serve_layer(std::vector<day0::bench::OwnedWeight>& store,
                                                  uint64_t seed0) {
  std::vector<day0::ExpertWeights> experts(kServeExperts);
  for (int64_t e = 0; e < kServeExperts; ++e) {
    auto& ew = experts[static_cast<size_t>(e)];
    const uint64_t seed = seed0 + static_cast<uint64_t>(3 * e);
    store.push_back(day0::bench::make_weight(day0::WeightFormat::kBF16, kInter, kHidden, seed));
    ew.gate = store.back().view;
    store.push_back(day0::bench::make_weight(day0::WeightFormat::kBF16, kInter, kHidden, seed + 1));
    ew.up = store.back().view;
    store.push_back(day0::bench::make_weight(day0::WeightFormat::kBF16, kHidden, kInter, seed + 2));
    ew.down = store.back().view;
  }
  return experts;
}

// Fresh uniform top-k picks, distinct per token, into ids [batch, top-k]; returns how many experts they
// touch.
size_t draw_serve_picks(std::mt19937& rng, int64_t batch, std::vector<int32_t>& ids) {
  std::vector<int32_t> perm(kServeExperts);
  std::set<int32_t> unique;
  for (int64_t t = 0; t < batch; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), kTopK, ids.begin() + t * kTopK);
    unique.insert(perm.begin(), perm.begin() + kTopK);
  }
  return unique.size();
}

// The experts of one bench-moe-a02b layer (64 experts, top-8, hidden 1024, expert width 512, BF16) at a
// serving step of `batch` decode tokens, picks drawn afresh every iteration (uniform, distinct per
// token) so that the touched experts come mostly from memory, as in `day0 serve`, not from the L3 a fixed
// pick would leave them in (a layer is 192 MB; what a 32 MiB L3 keeps of it makes the GB/s an upper
// bound: 0.71-0.83 ms for one token's experts where the server's counters give 0.79-0.94 a layer on Zen
// 4); 1024 tokens is the prefill of 16 streams' 64-token prompts (about 128 tokens an expert). Args:
// batch, activations (0: exact float32, 1: BF16 as `--dtype bf16`).
void BM_MoeServeStep(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool exact = state.range(1) == 0;
  std::vector<day0::bench::OwnedWeight> store;
  store.reserve(3 * kServeExperts);
  const std::vector<day0::ExpertWeights> experts = make_serve_layer(store, 0);
  const auto x = day0::bench::make_activations(batch * kHidden, 6);
  std::vector<int32_t> ids(static_cast<size_t>(batch * kTopK));  // [batch, top-k]
  std::vector<float> weights(ids.size(), 1.0f / kTopK);          // [batch, top-k]
  std::vector<float> out(static_cast<size_t>(batch * kHidden));  // [batch, hidden]
  day0::BackendOptions opts;
  opts.n_threads = 2;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  std::mt19937 rng(7);
  double touched_bytes = 0;
  const auto& e0 = experts[0];
  const double expert_bytes =
      static_cast<double>(e0.gate.data_bytes() + e0.up.data_bytes() + e0.down.data_bytes());
  for (auto _ : state) {
    state.PauseTiming();
    touched_bytes += static_cast<double>(draw_serve_picks(rng, batch, ids)) * expert_bytes;
    state.ResumeTiming();
    be->moe_experts({.x = {x.data(), batch, kHidden},
                     .expert_ids = {ids.data(), batch, kTopK},
                     .expert_weights = {weights.data(), batch, kTopK},
                     .experts = experts,
                     .out = {out.data(), batch, kHidden},
                     .exact = exact});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(exact ? "f32 activations" : "bf16 activations");
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["expert_GB/s"] = benchmark::Counter(touched_bytes / 1e9, benchmark::Counter::kIsRate);
  // Each token's top-k experts: gate, up and down, a multiply and an add per 2-byte weight.
  const double flops = static_cast<double>(batch * kTopK) * expert_bytes;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MoeServeStep)
    ->ArgsProduct({{1, 4, 16, 64}, {0, 1}})
    ->Args({256, 1})
    ->Args({1024, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// A whole decode step's experts of bench-moe-a02b: 12 layers of 64 experts (2.4 GB of BF16, past any
// L3), fresh uniform top-8 picks per token and layer each iteration, BF16 activations as `--dtype bf16`.
// This is what a `day0 serve` step reads (51-59 of 64 experts a layer at 16 tokens), so expert_GB/s sits
// beside the read probe of the same process (read_bw_GB/s) rather than above it as BM_MoeServeStep's
// can. Args: tokens in the step (1: single-stream decode; 16: a 16-stream serving step).
void BM_MoeDecodeStepFromMemory(benchmark::State& state) {
  constexpr int64_t kLayers = 12;
  static std::vector<day0::bench::OwnedWeight> store;  // built once: every size reads the same 2.4 GB
  static std::vector<std::vector<day0::ExpertWeights>> layers;
  if (layers.empty()) {
    store.reserve(static_cast<size_t>(3 * kLayers * kServeExperts));
    for (int64_t l = 0; l < kLayers; ++l)
      layers.push_back(make_serve_layer(store, static_cast<uint64_t>(3 * l * kServeExperts)));
  }
  const int64_t batch = state.range(0);
  const auto x = day0::bench::make_activations(batch * kHidden, 6);
  std::vector<int32_t> ids(static_cast<size_t>(batch * kTopK));  // [batch, top-k]
  std::vector<float> weights(ids.size(), 1.0f / kTopK);          // [batch, top-k]
  std::vector<float> out(static_cast<size_t>(batch * kHidden));  // [batch, hidden]
  day0::BackendOptions opts;
  opts.n_threads = 2;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  day0::ThreadPool probe_pool(opts.n_threads);
  day0::BandwidthProbe probe;
  const double read_bw = probe.read_gbps(probe_pool, 3);
  std::mt19937 rng(7);
  const auto& e0 = layers[0][0];
  const double expert_bytes =
      static_cast<double>(e0.gate.data_bytes() + e0.up.data_bytes() + e0.down.data_bytes());
  double touched_bytes = 0;
  for (auto _ : state) {
    for (const auto& experts : layers) {
      state.PauseTiming();
      touched_bytes += static_cast<double>(draw_serve_picks(rng, batch, ids)) * expert_bytes;
      state.ResumeTiming();
      be->moe_experts({.x = {x.data(), batch, kHidden},
                       .expert_ids = {ids.data(), batch, kTopK},
                       .expert_weights = {weights.data(), batch, kTopK},
                       .experts = experts,
                       .out = {out.data(), batch, kHidden},
                       .exact = false});
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["expert_GB/s"] = benchmark::Counter(touched_bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["read_bw_GB/s"] = read_bw;
}
BENCHMARK(BM_MoeDecodeStepFromMemory)->Arg(1)->Arg(4)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
