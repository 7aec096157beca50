// Decode speed at a given context length on the bench shapes (bench/RESULTS.md, "Bench shapes"): the KV
// cache is filled with random keys and values up to the context (decode speed does not depend on the
// values, and pre-filling 32k tokens would take far longer than the measurement), then a few tokens
// are decoded greedily one step at a time.
//   DAY0_E2E_MODELS=/tmp/bench-dense-1b:/tmp/bench-moe-a02b day0_decode_context_bench
// Threads: DAY0_THREADS (default 2). Context lengths: DAY0_CONTEXTS (default 512,4096,32768). KV cache
// dtype: DAY0_KV_DTYPE (bf16 default, f32, fp8). Counters: tok/s, KV bytes held per token.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "day0/runtime/model_loader.h"

namespace {

int bench_threads() {
  const char* t = std::getenv("DAY0_THREADS");
  return t ? std::atoi(t) : 2;
}

struct BenchModel {
  day0::LoadedModel model;
  day0::EngineHandle engine;
};

// Appends `context` random rows to every layer of the cache.
void fill_cache(day0::Backend& backend, day0::KvCache& cache, int64_t context) {
  constexpr int64_t kChunk = 256;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> first(static_cast<size_t>(kChunk * cache.first_width()));
  std::vector<float> second(static_cast<size_t>(kChunk * cache.second_width()));
  for (float& v : first) v = normal(rng);
  for (float& v : second) v = normal(rng);
  for (int64_t done = 0; done < context; done += kChunk) {
    const int64_t n = std::min(kChunk, context - done);
    for (int64_t l = 0; l < cache.n_layers(); ++l) {
      cache.append(backend, l, day0::ConstMatrix(first.data(), n, cache.first_width()),
                   day0::ConstMatrix(second.data(), n, cache.second_width()));
    }
    cache.commit(n);
  }
}

void BM_DecodeAt(benchmark::State& state, BenchModel* m) {
  const int64_t context = state.range(0);
  const int64_t n_new = context >= 16384 ? 8 : 16;
  double seconds = 0;
  for (auto _ : state) {
    day0::KvCache cache = m->engine.engine->new_cache();
    fill_cache(m->engine.engine->backend(), cache, context);
    int32_t token = 1;
    // Two untimed steps first: page faults of the mapped weights, pool start.
    std::chrono::steady_clock::time_point t0;
    for (int64_t i = -2; i < n_new; ++i) {
      if (i == 0) t0 = std::chrono::steady_clock::now();
      const day0::SequenceStep s{&cache, std::span<const int32_t>(&token, 1)};
      const auto logits = m->engine.engine->forward(std::span(&s, 1), true);
      if (!logits.is_ok()) {
        state.SkipWithError(logits.status().to_string().c_str());
        return;
      }
      const float* row = logits->row(0);
      token = static_cast<int32_t>(std::max_element(row, row + logits->cols) - row);
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["tok/s"] = static_cast<double>(n_new * state.iterations()) / seconds;
  day0::KvCache probe = m->engine.engine->new_cache();
  fill_cache(m->engine.engine->backend(), probe, 1024);
  state.counters["kv_B/token"] = static_cast<double>(probe.bytes()) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  static std::vector<std::unique_ptr<BenchModel>> models;
  std::vector<int64_t> contexts;
  {
    const char* env = std::getenv("DAY0_CONTEXTS");
    std::stringstream list(env ? env : "512,4096,32768");
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) contexts.push_back(std::atoll(item.c_str()));
    }
  }
  const char* env = std::getenv("DAY0_E2E_MODELS");
  std::stringstream paths(env ? env : "");
  std::string path;
  while (std::getline(paths, path, ':')) {
    if (path.empty()) continue;
    auto m = std::make_unique<BenchModel>();
    auto loaded = day0::load_model(path);
    if (!loaded.is_ok()) {
      std::fprintf(stderr, "decode context bench: %s\n", loaded.status().to_string().c_str());
      return 2;
    }
    m->model = std::move(loaded).value();
    day0::EngineOptions options;
    options.precision = day0::ActivationPrecision::kBF16;
    if (const char* kv = std::getenv("DAY0_KV_DTYPE"))
      options.kv_dtype = day0::parse_kv_dtype(kv).value_or(day0::KvDtype::kBF16);
    auto engine = day0::open_engine(m->model, "cpu", options, bench_threads());
    if (!engine.is_ok()) {
      std::fprintf(stderr, "decode context bench: %s\n", engine.status().to_string().c_str());
      return 2;
    }
    m->engine = std::move(engine).value();
    const std::string name = path.substr(path.find_last_of('/') + 1);
    for (int64_t ctx : contexts) {
      benchmark::RegisterBenchmark((name + "/decode_at").c_str(), BM_DecodeAt, m.get())
          ->Arg(ctx)
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    models.push_back(std::move(m));
  }
  if (models.empty()) std::fprintf(stderr, "decode context bench: set DAY0_E2E_MODELS=dir[:dir...]\n");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
