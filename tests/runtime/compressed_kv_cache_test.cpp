// DeepSeek-V4's compressed KV attention in the paged cache, on its goldens (BF16 weights, and FP8 with FP4
// experts): the entries sit in pool blocks and the partial groups in the sequence's state block, so a
// fork continues as the sequence it came from, a fork cut back to a whole-block snapshot (a prefix-cache
// entry) fed the rest gives the uncut sequence's logits, and a checkpoint rolls draft tokens back (each
// bit for bit against a run fed the same tokens without the cut), so speculative decoding works.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "cache_steps.h"
#include "day0/model/model_memory.h"
#include "day0/runtime/speculative.h"
#include "golden.h"

namespace day0::testing {
namespace {

const char* const kCompressed[] = {"deepseek-v4", "deepseek-v4-fp4"};

using namespace cache_steps;  // NOLINT(google-build-using-namespace): the tests' step vocabulary

// The model's largest compression ratio, so that the prompts below complete windows of every layer.
int64_t largest_ratio(const ModelSpec& spec) {
  int64_t m = 0;
  for (const LayerSpec& l : spec.layers) m = std::max(m, l.kv_compress_ratio);
  return m;
}

// A prompt of 3 blocks and 6 tokens (blocks of 8 or the largest ratio, whichever is larger).
//  - Fed in two steps (24, then 6 at 8 tokens a block): the first ends on a boundary and saves the
//    partial groups there. A plain fork of the 24 tokens fed the 6 gives the second step's logits;
//  - A fork of the 30 tokens cut back to 24 restores that snapshot and keeps the entries pooled from the
//    first 24 tokens only: fed the 6 again, the same logits, bit for bit;
//  - Fed in one step of 30, the compressors pool the rows in two parts around 24 and save there; a fork
//    cut back to 24 and fed the 6 gives the two-step run's logits (bit for bit where the layers compute
//    rows 0..23 the same in a step of 30 rows as in one of 24, the BF16 golden; the FP4 experts' kernel
//    does not: there within float tolerance).
TEST(CompressedKvCache, ForksAndPrefixCutsContinueAsTheUncutSequence) {
  for (const char* name : kCompressed) {
    SCOPED_TRACE(name);
    auto probe = open_golden(name, "cpu", exact_options(8));
    ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
    const int64_t m = largest_ratio(probe->model.spec);
    ASSERT_GT(m, 0);
    const int64_t bt = std::max<int64_t>(8, m);
    auto run = open_golden(name, "cpu", exact_options(bt));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    Engine& e = *run->engine;
    const auto cut = static_cast<size_t>(3 * bt), n = cut + 6;
    const std::vector<int32_t> prompt =
        tokens(static_cast<int>(n), 1, static_cast<int>(run->model.spec.vocab_size));
    const std::span<const int32_t> all(prompt);

    KvCache two_steps = e.new_cache();
    EXPECT_TRUE(two_steps.recurrent_model()) << "compressed layers keep snapshots";
    EXPECT_GT(two_steps.state_bytes(), 0u);
    EXPECT_EQ(two_steps.state_bytes(), recurrent_state_bytes_per_sequence(run->model.spec, KvDtype::kF32));
    step(e, two_steps, all.first(cut));
    EXPECT_EQ(two_steps.snapshot_tokens(), static_cast<int64_t>(cut));
    KvCache plain_fork = two_steps.fork();
    const FloatMatrix want = step(e, two_steps, all.subspan(cut));
    EXPECT_TRUE(same_bits(step(e, plain_fork, all.subspan(cut)), want)) << "a fork continues differently";

    // Entries are pool blocks: the fork's held the same blocks until it wrote.
    KvCache entry = two_steps.fork();
    EXPECT_FALSE(entry.can_truncate(static_cast<int64_t>(cut) - 1));
    ASSERT_TRUE(entry.truncate(static_cast<int64_t>(cut)).is_ok());
    for (int64_t l = 0; l < entry.n_layers(); ++l) {
      if (!entry.compressed_layer(l)) continue;
      const int64_t ratio = run->model.spec.layers[static_cast<size_t>(l)].kv_compress_ratio;
      EXPECT_EQ(entry.entries(l, CompressedEntries::kCompressor), static_cast<int64_t>(cut) / ratio) << l;
      EXPECT_EQ(two_steps.entries(l, CompressedEntries::kCompressor), static_cast<int64_t>(n) / ratio) << l;
    }
    KvCache hit = entry.fork();
    EXPECT_TRUE(same_bits(step(e, hit, all.subspan(cut)), want))
        << "logits after a prefix cut differ: " << max_diff(step(e, entry, all.subspan(cut)), want);

    KvCache whole = e.new_cache();
    const FloatMatrix one_step = step(e, whole, all);
    EXPECT_EQ(whole.snapshot_tokens(), static_cast<int64_t>(cut));
    EXPECT_TRUE(whole.can_truncate(static_cast<int64_t>(cut)));
    EXPECT_FALSE(whole.can_truncate(static_cast<int64_t>(cut) - static_cast<int64_t>(bt)));
    KvCache mid = whole.fork();
    ASSERT_TRUE(mid.truncate(static_cast<int64_t>(cut)).is_ok());
    const FloatMatrix from_mid = step(e, mid, all.subspan(cut));
    // The FP4 experts' kernel takes other paths for 30 rows than for 24: there within float tolerance.
    if (std::string(name) == "deepseek-v4") {
      EXPECT_TRUE(same_bits(from_mid, want))
          << "a snapshot taken mid-step differs: " << max_diff(from_mid, want);
    } else {
      EXPECT_LE(max_diff(from_mid, want), 1e-4);
    }
    // The one-step prefill's own last row: within float tolerance of the two-step one (a 6-row step may
    // take other kernel paths than a 30-row one).
    EXPECT_LE(max_diff(one_step, want), 1e-4);
  }
}

// Speculative decoding's rollback: a checkpoint, draft tokens that complete windows and pass a block
// boundary, back to the checkpoint, the accepted tokens: the logits of a sequence that never saw the
// drafts. Without a snapshot at the length asked, truncate refuses and the state is lost until restart.
TEST(CompressedKvCache, ACheckpointRollsDraftTokensBack) {
  for (const char* name : kCompressed) {
    SCOPED_TRACE(name);
    auto run = open_golden(name, "cpu", exact_options(8));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    Engine& e = *run->engine;
    const std::vector<int32_t> prompt = tokens(13, 3, 256);
    const std::vector<int32_t> draft = {7, 8, 9, 10, 11}, accepted = {7, 99};
    KvCache clean = e.new_cache();
    step(e, clean, prompt);
    const FloatMatrix want = step(e, clean, accepted);

    KvCache spec = e.new_cache();
    step(e, spec, prompt);
    spec.checkpoint();
    step(e, spec, draft);  // 13 -> 18: passes 16
    EXPECT_EQ(spec.snapshot_tokens(), 16);
    EXPECT_FALSE(spec.can_truncate(14));
    EXPECT_TRUE(spec.can_truncate(13));
    ASSERT_TRUE(spec.truncate(13).is_ok());
    EXPECT_TRUE(same_bits(step(e, spec, accepted), want));
    spec.drop_checkpoint();
    const Status lost = spec.truncate(14);
    EXPECT_EQ(lost.code(), StatusCode::kFailedPrecondition) << lost.to_string();
    EXPECT_TRUE(spec.state_lost());
    const int32_t t = 5;
    const SequenceStep s{&spec, std::span(&t, 1)};
    EXPECT_FALSE(e.forward(std::span(&s, 1), true).is_ok());
    ASSERT_TRUE(spec.truncate(0).is_ok());
    EXPECT_FALSE(spec.state_lost());
    KvCache fresh = e.new_cache();
    EXPECT_TRUE(same_bits(step(e, spec, prompt), step(e, fresh, prompt))) << "a restart starts clean";
  }
}

// Speculative decoding on DeepSeek-V4 (before this cache kept entries per position it refused to cut a
// compressed layer back): n-gram drafts, and drafts from the same weights with BF16 activations, give
// plain decoding's tokens, with drafts rejected and rolled back on the way. Verified one row a forward
// step, each row is a one-token step: the log-probabilities are plain decoding's to the bit. In steps of
// k + 1 rows within float tolerance: the grouped output projection (o_a) has no row-invariant path, so a
// wide step rounds differently from a one-token one.
TEST(CompressedKvCache, SpeculativeDecodingGivesPlainDecodingsTokens) {
  auto run = open_golden("deepseek-v4", "cpu", exact_options(8));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& e = *run->engine;
  const auto vocab = static_cast<int>(e.spec().vocab_size);
  std::vector<int32_t> prompt = tokens(12, 7, vocab);
  prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 6);  // something for the n-gram lookup
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = 20;
  request.top_logprobs = 2;
  KvCache plain_cache = e.new_cache();
  GenerationRequest plain_request = request;
  plain_request.cache = &plain_cache;
  auto plain = generate_batch(e, std::span(&plain_request, 1));
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  const GenerationResult& want = plain->front();
  ASSERT_EQ(want.steps.size(), 20u);

  EngineOptions draft_options = exact_options(8);
  draft_options.precision = ActivationPrecision::kBF16;
  auto draft_engine = Engine::create(run->model.spec, run->model.weights, *run->backend, draft_options);
  ASSERT_TRUE(draft_engine.is_ok()) << draft_engine.status().to_string();
  int64_t rejected = 0;
  for (int64_t rows : {1, 0}) {
    for (int64_t k : {2, 4}) {
      NgramDrafter ngram;
      ModelDrafter model(**draft_engine);
      for (Drafter* drafter : {static_cast<Drafter*>(&ngram), static_cast<Drafter*>(&model)}) {
        SCOPED_TRACE(
            fmt::format("{} k={} rows per forward {}", drafter == &ngram ? "ngram" : "model", k, rows));
        KvCache cache = e.new_cache();
        GenerationRequest r = request;
        r.cache = &cache;
        auto spec = generate_speculative(e, r, *drafter, SpecOptions{.tokens = k, .rows_per_forward = rows});
        ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
        const GenerationResult& got = spec->result;
        ASSERT_EQ(got.tokens(), want.tokens());
        EXPECT_EQ(cache.length(), plain_cache.length());
        for (size_t i = 0; i < want.steps.size(); ++i) {
          if (rows == 1) {
            EXPECT_EQ(got.steps[i].chosen.logprob, want.steps[i].chosen.logprob) << "step " << i;
          } else {
            EXPECT_NEAR(got.steps[i].chosen.logprob, want.steps[i].chosen.logprob, 1e-4) << "step " << i;
          }
        }
        rejected += spec->stats.drafted - spec->stats.accepted;
      }
    }
  }
  EXPECT_GT(rejected, 0) << "no draft was rolled back";
}

// The pool's books: entry blocks and state blocks shared by a fork, copied when written, all given back
// with their last holder.
TEST(CompressedKvCache, ThePoolSharesAndFreesEntryAndStateBlocks) {
  auto run = open_golden("deepseek-v4", "cpu", exact_options(8));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& e = *run->engine;
  const KvBlockPool& pool = e.kv_pool();
  {
    KvCache a = e.new_cache();
    step(e, a, tokens(20, 5, 256));
    const KvPoolStats before = pool.stats();
    EXPECT_EQ(before.blocks_allocated, a.blocks_held());
    EXPECT_EQ(before.state_blocks_allocated, 2);  // live and the snapshot at 16
    KvCache b = a.fork();
    EXPECT_EQ(pool.stats().blocks_allocated, before.blocks_allocated);
    EXPECT_EQ(pool.stats().state_blocks_allocated, 2);
    const int32_t t = 9;
    step(e, b, std::span(&t, 1));
    EXPECT_GT(pool.stats().blocks_allocated, before.blocks_allocated);
    EXPECT_EQ(pool.stats().state_blocks_allocated, 3) << "the fork's live state was copied before its write";
  }
  EXPECT_EQ(pool.stats().blocks_allocated, 0);
  EXPECT_EQ(pool.stats().state_blocks_allocated, 0);
}

}  // namespace
}  // namespace day0::testing
