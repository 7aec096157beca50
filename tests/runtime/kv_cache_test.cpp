// The paged KV cache inside the engine: bytes held per dtype (the figure `inspect` prints), sliding
// windows giving blocks back, prefix sharing with copy on write, the fragmentation metric, batched
// generation against each sequence alone, and a continued conversation against a fresh prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "day0/model/model_memory.h"
#include "day0/runtime/generate.h"
#include "golden.h"

namespace day0::testing {
namespace {

FloatMatrix run_step(Engine& e, KvCache& cache, std::span<const int32_t> ids, bool last_only = true) {
  const SequenceStep s{&cache, ids};
  auto logits = e.forward(std::span(&s, 1), last_only);
  D0_CHECK_MSG(logits.is_ok(), logits.status().to_string());
  return copy_matrix(*logits);
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

double range_of(std::span<const float> a) {
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  return *hi - *lo;
}

std::unique_ptr<Engine> engine_for(const GoldenRun& run, const ModelSpec& spec, EngineOptions o) {
  auto e = Engine::create(spec, run.model.weights, *run.backend, o);
  D0_CHECK_MSG(e.is_ok(), e.status().to_string());
  return std::move(e).value();
}

TEST(PagedKv, BytesHeldPerTokenAreWhatInspectPrintsForEachDtype) {
  for (const char* name : {"llama3", "deepseek-v3"}) {
    auto run = open_golden(name);
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    const ModelSpec& spec = run->model.spec;
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
      EngineOptions o;
      o.kv_dtype = dtype;
      o.kv_block_tokens = 4;
      auto e = engine_for(*run, spec, o);
      KvCache cache = e->new_cache();
      const std::vector<int32_t> ids(12, 3);  // 3 full blocks per layer
      run_step(*e, cache, ids);
      const uint64_t per_token = kv_cache_summary(spec, dtype).bytes_per_token;
      EXPECT_EQ(cache.bytes(), per_token * 12) << name << " " << kv_dtype_name(dtype);
      EXPECT_EQ(e->kv_pool().bytes_per_token_row() * static_cast<uint64_t>(spec.n_layers), per_token);
      EXPECT_EQ(e->kv_pool().stats().fragmentation(), 0.0);
    }
    EXPECT_EQ(kv_cache_summary(spec, KvDtype::kF32).bytes_per_token,
              2 * kv_cache_summary(spec, KvDtype::kBF16).bytes_per_token);
    EXPECT_EQ(kv_cache_summary(spec, KvDtype::kBF16).bytes_per_token,
              2 * kv_cache_summary(spec, KvDtype::kFp8E4M3).bytes_per_token);
  }
}

// A pipeline stage's cache: only its layers take blocks; the others follow the length through
// commits and truncations (which must not see their empty tables as windows that gave keys back).
TEST(PagedKv, AStagesCacheHoldsOnlyItsLayers) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const ModelSpec& spec = run->model.spec;  // 2 layers
  auto pool = std::make_shared<KvBlockPool>(8, 8, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4});
  KvCache cache(pool, spec, 1, 2);
  std::vector<int64_t> slots;
  KvBlockCopies copies;
  for (const int64_t rows : {10, 3}) {
    cache.append_slots(1, rows, slots, copies);  // layer 1 only, as its stage's engine does
    cache.commit(rows);
  }
  EXPECT_EQ(cache.length(), 13);
  EXPECT_EQ(cache.blocks_held(), 4);  // ceil(13 / 4) blocks of layer 1, none of layer 0
  EXPECT_FALSE(cache.paged(0));
  EXPECT_TRUE(cache.paged(1));
  ASSERT_TRUE(cache.truncate(9).is_ok());
  ASSERT_TRUE(cache.truncate(5).is_ok());
  EXPECT_EQ(cache.blocks_held(), 2);
  cache.append_slots(1, 2, slots, copies);
  cache.commit(2);
  EXPECT_EQ(cache.length(), 7);
  ASSERT_TRUE(cache.truncate(0).is_ok());
  EXPECT_EQ(cache.blocks_held(), 0);
}

// Appends `rows` to every layer `cache` keeps, as a step does; returns the blocks the pool handed out
// (causal layers release nothing, so that is the growth of blocks_allocated).
int64_t append_and_count(KvCache& cache, int64_t rows) {
  const int64_t before = cache.pool().stats().blocks_allocated;
  std::vector<int64_t> slots;
  KvBlockCopies copies;
  for (int64_t l = 0; l < cache.n_layers(); ++l)
    if (cache.paged(l)) cache.append_slots(l, rows, slots, copies);
  cache.commit(rows);
  return cache.pool().stats().blocks_allocated - before;
}

// blocks_needed (what the scheduler plans with) against what an append then allocates: a fresh
// sequence, a partial block, an exactly full one, and shared blocks after a fork or a prefix hit.
TEST(PagedKv, BlocksNeededIsWhatAnAppendAllocates) {
  ModelSpec spec;
  spec.n_layers = 2;
  spec.layers.resize(2);  // causal
  auto pool = std::make_shared<KvBlockPool>(8, 8, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4});
  auto expect_append = [](KvCache& c, int64_t rows, int64_t blocks, const char* what) {
    EXPECT_EQ(c.blocks_needed(rows), blocks) << what;
    EXPECT_EQ(append_and_count(c, rows), blocks) << what;
  };
  KvCache a(pool, spec);
  EXPECT_EQ(a.blocks_needed(0), 0);
  expect_append(a, 6, 4, "fresh: 2 blocks a layer");
  expect_append(a, 1, 0, "into the partial block");
  expect_append(a, 1, 0, "filling it exactly");
  expect_append(a, 1, 2, "past a full block");  // length 9

  KvCache b = a.fork();  // shares 2 full blocks and the partial third, per layer
  EXPECT_EQ(b.blocks_needed(1), 2) << "the shared partial block is copied";
  EXPECT_EQ(b.blocks_needed(4), 4) << "copied, then one more block";
  expect_append(b, 4, 4, "forked, partial last block");
  expect_append(a, 1, 0, "the other holder, no longer shared");  // length 10

  KvCache c = a.fork();
  ASSERT_TRUE(c.truncate(8).is_ok());  // a prefix-cache hit: whole shared blocks
  expect_append(c, 3, 2, "prefix hit on a block boundary: new blocks, no copy");
  KvCache d = a.fork();
  ASSERT_TRUE(d.truncate(5).is_ok());  // ends inside a shared block
  expect_append(d, 4, 4, "prefix hit inside a block: a copy, then a new block");

  KvCache stage(pool, spec, 1, 2);  // a pipeline stage keeps layer 1 only
  expect_append(stage, 5, 2, "a stage's layers only");
}

TEST(PagedKv, TheEngineDefaultsToABf16Cache) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  EXPECT_EQ(run->engine->kv_pool().options().dtype, KvDtype::kBF16);
  EXPECT_EQ(run->engine->kv_pool().bytes_per_token_row(),
            kv_bytes_per_token_per_layer(run->model.spec, KvDtype::kBF16));
}

TEST(PagedKv, FragmentationCountsAllocatedButUnusedSlots) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok());
  EngineOptions o;
  o.kv_block_tokens = 4;
  auto e = engine_for(*run, run->model.spec, o);
  KvCache cache = e->new_cache();
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};  // 2 blocks per layer, 6 of 8 slots used
  run_step(*e, cache, ids);
  const KvPoolStats s = e->kv_pool().stats();
  EXPECT_EQ(s.blocks_allocated, 2 * run->model.spec.n_layers);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 2.0 / 8.0);
  { KvCache gone = std::move(cache); }  // blocks go back to the pool
  EXPECT_EQ(e->kv_pool().stats().blocks_allocated, 0);
}

// A layer made sliding (window 8, blocks of 4) keeps at most a few blocks while decoding far past
// its window, and still computes what a full prefill of the same tokens computes.
TEST(PagedKv, SlidingWindowMemoryStaysBoundedPastTheWindow) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok());
  ModelSpec spec = run->model.spec;
  spec.layers[0].mask = AttentionMask::kSliding;
  spec.layers[0].window = 8;
  EngineOptions o;
  o.kv_block_tokens = 4;
  auto e = engine_for(*run, spec, o);
  KvCache cache = e->new_cache();
  std::vector<int32_t> ids = {7};
  run_step(*e, cache, ids);
  const int64_t full_layers = spec.n_layers - 1;
  FloatMatrix last;
  for (int i = 1; i < 40; ++i) {
    ids.push_back(static_cast<int32_t>((i * 37) % spec.vocab_size));
    last = run_step(*e, cache, std::span(&ids.back(), 1));
    const int64_t full_blocks = full_layers * ((cache.length() + 3) / 4);
    EXPECT_LE(cache.blocks_held() - full_blocks, 8 / 4 + 1) << "after " << cache.length() << " tokens";
  }
  KvCache fresh = e->new_cache();
  const FloatMatrix prefill = run_step(*e, fresh, ids);
  EXPECT_LE(max_abs_diff(last.row(0), prefill.row(0)), 1e-4 * range_of(prefill.row(0)));
  EXPECT_FALSE(cache.truncate(5).is_ok());  // keys position 5 would need were given back
}

// Two sequences share a prefix (fork): each writes its own tail (copy on write) and computes what a
// fresh sequence with the same tokens computes; the shared full blocks stay shared.
TEST(PagedKv, ForkedSequencesShareThePrefixAndCopyOnWrite) {
  auto run = open_golden("qwen3");
  ASSERT_TRUE(run.is_ok());
  EngineOptions o;
  o.kv_block_tokens = 4;
  auto e = engine_for(*run, run->model.spec, o);
  const std::vector<int32_t> prefix = {11, 12, 13, 14, 15, 16};  // 1 full + 1 partial block per layer
  KvCache a = e->new_cache();
  run_step(*e, a, prefix);
  KvCache b = a.fork();
  const int64_t layers = run->model.spec.n_layers;
  EXPECT_EQ(e->kv_pool().stats().blocks_allocated, 2 * layers);  // nothing copied yet
  const int32_t x = 21, y = 22;
  const FloatMatrix ax = run_step(*e, a, std::span(&x, 1));
  const FloatMatrix by = run_step(*e, b, std::span(&y, 1));
  EXPECT_EQ(e->kv_pool().stats().blocks_allocated, 3 * layers);  // the partial block was copied once
  EXPECT_EQ(e->kv_pool().blocks_allocated(), 3 * layers);        // the count without the walk
  for (auto [tail, got] : {std::pair{x, &ax}, std::pair{y, &by}}) {
    std::vector<int32_t> all = prefix;
    all.push_back(tail);
    KvCache fresh = e->new_cache();
    const FloatMatrix want = run_step(*e, fresh, all);
    EXPECT_LE(max_abs_diff(got->row(0), want.row(0)), 1e-5 * range_of(want.row(0))) << "tail " << tail;
  }
}

TEST(PagedKv, Bf16AndFp8CachesStayCloseToTheF32Cache) {
  auto run = open_golden("qwen3");
  ASSERT_TRUE(run.is_ok());
  const auto& p = run->reference.prompts.back();
  const std::vector<int32_t> ids(p.input_ids.begin(), p.input_ids.end());
  EngineOptions f32;
  f32.kv_dtype = KvDtype::kF32;
  auto exact = engine_for(*run, run->model.spec, f32);
  KvCache c0 = exact->new_cache();
  const FloatMatrix want = run_step(*exact, c0, ids, false);
  for (auto [dtype, tol] : {std::pair{KvDtype::kBF16, 2e-2}, std::pair{KvDtype::kFp8E4M3, 0.15}}) {
    EngineOptions o;
    o.kv_dtype = dtype;
    auto e = engine_for(*run, run->model.spec, o);
    KvCache c = e->new_cache();
    const FloatMatrix got = run_step(*e, c, ids, false);
    const double err = max_abs_diff(got.data, want.data), range = range_of(want.data);
    EXPECT_LE(err, tol * range) << kv_dtype_name(dtype);
    EXPECT_GT(err, 0.0) << kv_dtype_name(dtype) << ": rounding the cache must change something";
  }
}

// One batched generation of prompts of different lengths = each prompt alone (same greedy tokens,
// logits within float tolerance).
TEST(BatchedGeneration, EqualsEachSequenceAlone) {
  for (const char* name : {"llama3", "qwen3-moe", "gpt-oss", "deepseek-v3"}) {
    auto run = open_golden(name);
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {9}, {4, 4, 8, 15, 16}};
    std::vector<GenerationRequest> requests;
    for (const auto& p : prompts) requests.push_back({.prompt = p, .max_new = 6, .top_logprobs = 1});
    auto together = generate_batch(*run->engine, requests);
    ASSERT_TRUE(together.is_ok()) << together.status().to_string();
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto alone = generate(*run->engine, prompts[i], 6, SamplingParams{}, 1);
      ASSERT_TRUE(alone.is_ok());
      EXPECT_EQ((*together)[i].tokens(), alone->tokens()) << name << " prompt " << i;
      for (size_t s = 0; s < alone->steps.size(); ++s)
        EXPECT_NEAR((*together)[i].steps[s].chosen.logprob, alone->steps[s].chosen.logprob, 1e-3) << name;
    }
  }
}

// A conversation continued on its cache (only the new turn pre-filled) picks what a fresh prefill of
// the whole conversation picks.
TEST(BatchedGeneration, ContinuingACacheEqualsAFreshPrefill) {
  auto run = open_golden("qwen3");
  ASSERT_TRUE(run.is_ok());
  Engine& e = *run->engine;
  const std::vector<int32_t> turn1 = {3, 1, 4, 1, 5}, turn2 = {9, 2, 6};
  KvCache cache = e.new_cache();
  GenerationRequest first{.prompt = turn1, .max_new = 4, .cache = &cache};
  auto r1 = generate_batch(e, std::span(&first, 1));
  ASSERT_TRUE(r1.is_ok());
  const auto reply = r1->front().tokens();
  EXPECT_EQ(cache.length(), static_cast<int64_t>(turn1.size() + reply.size() - 1));
  std::vector<int32_t> next = {reply.back()};
  next.insert(next.end(), turn2.begin(), turn2.end());
  GenerationRequest second{.prompt = next, .max_new = 5, .cache = &cache};
  auto r2 = generate_batch(e, std::span(&second, 1));
  ASSERT_TRUE(r2.is_ok());
  std::vector<int32_t> conversation = turn1;
  conversation.insert(conversation.end(), reply.begin(), reply.end());
  conversation.insert(conversation.end(), turn2.begin(), turn2.end());
  auto fresh = generate(e, conversation, 5, SamplingParams{});
  ASSERT_TRUE(fresh.is_ok());
  EXPECT_EQ(r2->front().tokens(), fresh->tokens());
  EXPECT_EQ(r2->front().prompt_tokens, static_cast<int64_t>(next.size()));  // only the new turn
}

}  // namespace
}  // namespace day0::testing
