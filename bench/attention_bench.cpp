// Decode attention (one query token, 32 heads, 8 kv heads, head dim 128, float32 KV cache) at 4k and
// 32k context on the cpu backend: time per token and GB/s of K/V read. Args: context, threads. Below,
// prefill attention over the paged BF16 cache per SIMD level.
#include <benchmark/benchmark.h>

#include <span>
#include <string>
#include <vector>

#include "bench_weights.h"
#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/core/numeric.h"

namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kDim = 128;

void BM_AttentionDecode(benchmark::State& state) {
  const int64_t context = state.range(0);
  const auto q = day0::bench::make_activations(kHeads * kDim, 1);
  const auto k = day0::bench::make_activations(context * kKvHeads * kDim, 2);
  const auto v = day0::bench::make_activations(context * kKvHeads * kDim, 3);
  std::vector<float> out(static_cast<size_t>(kHeads * kDim));
  day0::BackendOptions opts;
  opts.n_threads = static_cast<int>(state.range(1));
  auto be = std::move(day0::make_backend("cpu", opts).value());
  for (auto _ : state) {
    be->attention({.q = {q.data(), 1, kHeads * kDim},
                   .k = {k.data(), context, kKvHeads * kDim},
                   .v = {v.data(), context, kKvHeads * kDim},
                   .out = {out.data(), 1, kHeads * kDim},
                   .n_heads = kHeads,
                   .n_kv_heads = kKvHeads,
                   .head_dim = kDim,
                   .q_pos0 = context - 1});
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = 2.0 * static_cast<double>(context * kKvHeads * kDim) * 4.0;
  state.counters["kv_GB/s"] =
      benchmark::Counter(bytes / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{4096, 32768}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Prefill attention over the paged BF16 KV cache (`day0 serve`'s and `day0 bench`'s path): one sequence
// of 512 tokens, causal, 32-token pages, per layer. Shapes: 0 SmolLM2-135M (9 heads, 3 KV heads, head
// dim 64), 1 bench-dense-1b (32 / 8 / 64). Args: shape, SIMD level (1 avx2, 2 avx512; levels this CPU
// lacks are skipped).
void BM_AttentionPrefillPaged(benchmark::State& state) {
  constexpr int64_t kTokens = 512, kPage = 32;
  const int64_t heads = state.range(0) == 0 ? 9 : 32, kv_heads = state.range(0) == 0 ? 3 : 8, dim = 64;
  const auto level = static_cast<day0::SimdLevel>(state.range(1));
  if (static_cast<int>(level) > static_cast<int>(day0::detected_simd_level())) {
    state.SkipWithError("SIMD level not available on this CPU");
    return;
  }
  const int64_t width = kv_heads * dim, pages = kTokens / kPage;
  const auto k = day0::bench::make_activations(kTokens * width, 2);
  const auto v = day0::bench::make_activations(kTokens * width, 3);
  std::vector<std::vector<uint16_t>> k_pages(pages), v_pages(pages);  // [kPage, width] each, BF16
  std::vector<const void*> k_ptrs, v_ptrs;
  for (int64_t p = 0; p < pages; ++p) {
    for (int64_t i = 0; i < kPage * width; ++i) {
      k_pages[p].push_back(day0::f32_to_bf16(k[static_cast<size_t>(p * kPage * width + i)]));
      v_pages[p].push_back(day0::f32_to_bf16(v[static_cast<size_t>(p * kPage * width + i)]));
    }
    k_ptrs.push_back(k_pages[p].data());
    v_ptrs.push_back(v_pages[p].data());
  }
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t p = 0; p < pages; ++p) table[static_cast<size_t>(p)] = static_cast<int32_t>(p);
  const day0::KvPages kv{.dtype = day0::KvDtype::kBF16,
                         .block_tokens = kPage,
                         .first_width = width,
                         .second_width = width,
                         .first_blocks = k_ptrs.data(),
                         .second_blocks = v_ptrs.data(),
                         .table = table,
                         .pos0 = 0,
                         .length = kTokens};
  const day0::PagedSequence seq{0, kTokens, 0, kv};
  const auto q = day0::bench::make_activations(kTokens * heads * dim, 1);
  std::vector<float> out(static_cast<size_t>(kTokens * heads * dim));
  day0::BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = level;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  for (auto _ : state) {
    be->paged_attention({.q = {q.data(), kTokens, heads * dim},
                         .seqs = std::span(&seq, 1),
                         .out = {out.data(), kTokens, heads * dim},
                         .n_heads = heads,
                         .n_kv_heads = kv_heads,
                         .head_dim = dim});
    benchmark::DoNotOptimize(out.data());
  }
  // Scores and value sums over the causal half: 2 x 2 x heads x dim x T (T + 1) / 2 flops.
  const double flops = 2.0 * static_cast<double>(heads * dim * kTokens * (kTokens + 1));
  state.SetLabel(std::string(state.range(0) == 0 ? "smollm2 " : "dense-1b ") + day0::simd_level_name(level));
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefillPaged)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One decode step of `seqs` sequences, each `keys` tokens into a paged BF16 cache (32-row pages, every
// sequence its own pages), bench-moe-a02b's heads (16 query / 2 KV, dim 128): a serving step's attention
// per layer. Reports the KV bytes read per second. Args: sequences, keys.
void BM_AttentionDecodePaged(benchmark::State& state) {
  constexpr int64_t kPage = 32, kQHeads = 16, kGroupHeads = 2, kHeadDim = 128,
                    kWidth = kGroupHeads * kHeadDim;
  const int64_t seqs = state.range(0), keys = state.range(1), pages = (keys + kPage - 1) / kPage;
  std::vector<std::vector<uint16_t>> k_pages, v_pages;  // [kPage, kWidth] BF16 each, seqs * pages of them
  std::vector<const void*> k_ptrs, v_ptrs;
  for (int64_t p = 0; p < seqs * pages; ++p) {
    const auto k = day0::bench::make_activations(kPage * kWidth, static_cast<uint64_t>(2 * p + 2));
    const auto v = day0::bench::make_activations(kPage * kWidth, static_cast<uint64_t>(2 * p + 3));
    k_pages.emplace_back();
    v_pages.emplace_back();
    for (int64_t i = 0; i < kPage * kWidth; ++i) {
      k_pages.back().push_back(day0::f32_to_bf16(k[static_cast<size_t>(i)]));
      v_pages.back().push_back(day0::f32_to_bf16(v[static_cast<size_t>(i)]));
    }
  }
  for (int64_t p = 0; p < seqs * pages; ++p) {
    k_ptrs.push_back(k_pages[static_cast<size_t>(p)].data());
    v_ptrs.push_back(v_pages[static_cast<size_t>(p)].data());
  }
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  std::vector<day0::PagedSequence> batch;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t p = 0; p < pages; ++p)
      tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * pages + p));
  }
  for (int64_t s = 0; s < seqs; ++s) {
    const day0::KvPages kv{.dtype = day0::KvDtype::kBF16,
                           .block_tokens = kPage,
                           .first_width = kWidth,
                           .second_width = kWidth,
                           .first_blocks = k_ptrs.data(),
                           .second_blocks = v_ptrs.data(),
                           .table = tables[static_cast<size_t>(s)],
                           .pos0 = 0,
                           .length = keys};
    batch.push_back(day0::PagedSequence{static_cast<int32_t>(s), 1, keys - 1, kv});
  }
  const auto q = day0::bench::make_activations(seqs * kQHeads * kHeadDim, 1);
  std::vector<float> out(static_cast<size_t>(seqs * kQHeads * kHeadDim));
  day0::BackendOptions opts;
  opts.n_threads = 2;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  for (auto _ : state) {
    be->paged_attention({.q = {q.data(), seqs, kQHeads * kHeadDim},
                         .seqs = batch,
                         .out = {out.data(), seqs, kQHeads * kHeadDim},
                         .n_heads = kQHeads,
                         .n_kv_heads = kGroupHeads,
                         .head_dim = kHeadDim});
    benchmark::DoNotOptimize(out.data());
  }
  const double kv_bytes = 2.0 * 2.0 * static_cast<double>(seqs * keys * kWidth);  // keys and values, BF16
  state.counters["KV_GB/s"] = benchmark::Counter(kv_bytes * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecodePaged)
    ->Args({1, 4096})
    ->Args({16, 100})
    ->Args({16, 1000})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
