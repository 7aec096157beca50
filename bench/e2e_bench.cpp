// End-to-end prefill and decode speed of the engine on real checkpoints (the bench shapes of
// bench/RESULTS.md, "Bench shapes", synthesised by bench/e2e.sh), stated against the roofline:
// bytes of weights a decoded token activates / measured read bandwidth (same threads, same minute).
//   DAY0_E2E_MODELS=/tmp/bench-dense-1b:/tmp/bench-moe-a02b day0_e2e_bench
// Threads: DAY0_THREADS (default 2); activations DAY0_E2E_DTYPE=bf16 (default) or f32. Counters: tok/s,
// roofline_tok/s, share_of_roofline, GB/s.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/backends/thread_pool.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"

namespace {

int bench_threads() {
  const char* t = std::getenv("DAY0_THREADS");
  return t ? std::atoi(t) : 2;
}

// Read bandwidth (GB/s), summed by `threads` threads; best of 3 passes (machine_limits.h).
double read_bandwidth_gbs(int threads) {
  static day0::BandwidthProbe probe;
  day0::ThreadPool pool(threads);
  return probe.read_gbps(pool, 3);
}

// Weight bytes one decoded token reads: every projection of every layer (attention, MLA, the sparse-
// attention indexer, linear attention), the top-k experts' share of the routed experts, router, LM
// head (the embedding contributes one row).
double activated_bytes_per_token(const day0::LoadedModel& m) {
  const auto& spec = m.spec;
  double bytes = static_cast<double>(m.weights->lm_head.w.data_bytes() + m.weights->lm_head.w.scale_bytes());
  auto lin = [](const day0::Linear& l) {
    return l.present() ? static_cast<double>(l.w.data_bytes() + l.w.scale_bytes()) : 0.0;
  };
  auto view = [](const day0::WeightView& w) {
    return w.data ? static_cast<double>(w.data_bytes() + w.scale_bytes()) : 0.0;
  };
  for (size_t l = 0; l < m.weights->layers.size(); ++l) {
    const auto& lw = m.weights->layers[l];
    const auto& a = lw.attn;
    for (const auto* x :
         {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.index_q, &a.index_k, &a.index_weights})
      bytes += lin(*x);
    const auto& la = lw.linear;
    for (const auto* x : {&la.in_qkvz, &la.in_ba, &la.out}) bytes += lin(*x);
    if (spec.layers[l].moe) {
      double experts = 0;
      for (const auto& e : lw.moe.experts) experts += view(e.gate) + view(e.up) + view(e.down);
      bytes += experts / static_cast<double>(lw.moe.experts.size()) *
               static_cast<double>(spec.moe->experts_per_token);
      bytes += lin(lw.moe.router) + lin(lw.moe.shared.gate) + lin(lw.moe.shared.up) +
               lin(lw.moe.shared.down) + lin(lw.moe.shared_gate);
    } else {
      bytes += lin(lw.mlp.gate) + lin(lw.mlp.up) + lin(lw.mlp.down);
    }
  }
  return bytes;
}

struct BenchModel {
  std::string path;
  day0::LoadedModel model;
  day0::EngineHandle engine;
};

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

void BM_Prefill(benchmark::State& state, BenchModel* m) {
  const auto ids = prompt_of(state.range(0), m->model.spec.vocab_size);
  double seconds = 0;
  for (auto _ : state) {
    day0::KvCache cache = m->engine.engine->new_cache();
    const day0::SequenceStep s{&cache, ids};
    const auto t0 = std::chrono::steady_clock::now();
    const auto logits = m->engine.engine->forward(std::span(&s, 1), true);
    if (!logits.is_ok()) {
      state.SkipWithError(logits.status().to_string().c_str());
      return;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["tok/s"] = static_cast<double>(ids.size() * state.iterations()) / seconds;
}

void BM_Decode(benchmark::State& state, BenchModel* m) {
  const int64_t n_new = state.range(0);
  const auto prompt = prompt_of(16, m->model.spec.vocab_size);
  const double bw = read_bandwidth_gbs(bench_threads());
  const double bytes = activated_bytes_per_token(m->model);
  double tps = 0;
  for (auto _ : state) {
    const auto g = day0::generate(*m->engine.engine, prompt, n_new + 1, day0::SamplingParams{});
    if (!g.is_ok()) {
      state.SkipWithError(g.status().to_string().c_str());
      return;
    }
    tps = g->decode_tokens_per_second();
  }
  state.counters["tok/s"] = tps;
  state.counters["GB/s"] = bw;
  state.counters["GB/token"] = bytes / 1e9;
  state.counters["roofline_tok/s"] = bw * 1e9 / bytes;
  state.counters["share_of_roofline"] = tps / (bw * 1e9 / bytes);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  static std::vector<std::unique_ptr<BenchModel>> models;
  const char* env = std::getenv("DAY0_E2E_MODELS");
  std::stringstream paths(env ? env : "");
  std::string path;
  while (std::getline(paths, path, ':')) {
    if (path.empty()) continue;
    auto m = std::make_unique<BenchModel>();
    m->path = path;
    // BF16 activations by default (the fast BF16-weight GEMM, and the integer kernels for an INT8 / INT4
    // checkpoint); DAY0_E2E_DTYPE=f32 for exact float32.
    day0::EngineOptions options;
    const char* dtype = std::getenv("DAY0_E2E_DTYPE");
    options.precision = dtype && std::string(dtype) == "f32" ? day0::ActivationPrecision::kF32
                                                             : day0::ActivationPrecision::kBF16;
    auto loaded = day0::load_model(path, day0::load_options_for(options.precision));
    if (!loaded.is_ok()) {
      std::fprintf(stderr, "e2e bench: %s\n", loaded.status().to_string().c_str());
      return 2;
    }
    m->model = std::move(loaded).value();
    auto engine = day0::open_engine(m->model, "cpu", options, bench_threads());
    if (!engine.is_ok()) {
      std::fprintf(stderr, "e2e bench: %s\n", engine.status().to_string().c_str());
      return 2;
    }
    m->engine = std::move(engine).value();
    const std::string name = path.substr(path.find_last_of('/') + 1);
    benchmark::RegisterBenchmark((name + "/prefill").c_str(), BM_Prefill, m.get())
        ->Arg(512)
        ->Iterations(2)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((name + "/decode").c_str(), BM_Decode, m.get())
        ->Arg(64)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    models.push_back(std::move(m));
  }
  if (models.empty())
    std::fprintf(stderr, "e2e bench: set DAY0_E2E_MODELS=dir[:dir...] (bench/e2e.sh does)\n");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
