// The step mirror's message (serving under mpirun): a message with cache operations, sequences and
// tokens comes back as it went; a follower refuses any word out of bounds; a follower's caches replay
// rank 0's cache operations (prefix entries made, forked, dropped; sequences let go of), sharing
// blocks as rank 0 does and refusing an operation that names what it does not hold; on a hybrid model an
// entry carries the recurrent state saved at its end, and a sequence forked from it goes on with the
// logits of one fed the same steps.
#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "day0/serve/step_mirror.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

using serve::CacheOp;
using serve::CacheOpKind;
using serve::StepMessage;
using serve::StepMessageKind;

StepMessage a_step() {
  StepMessage m;
  m.kind = StepMessageKind::kStep;
  m.last_only = true;
  m.ops = {{CacheOpKind::kRelease, 3, 0, 0},
           {CacheOpKind::kPrefixInsert, 4, 7, 64},
           {CacheOpKind::kPrefixFork, 9, 7, 32},
           {CacheOpKind::kPrefixDrop, 0, 2, 0}};
  m.sequences = {{4, 70, 1}, {9, 32, 3}};
  m.tokens = {11, 0, 255, 42};
  return m;
}

TEST(StepMirrorMessage, ComesBackAsItWent) {
  const StepMessage m = a_step();
  const std::vector<int64_t> words = serve::encode_step_message(m);
  EXPECT_EQ(words.size(), 5u + 4 * 4 + 3 * 2 + 4);
  auto back = serve::decode_step_message(words);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, m);

  StepMessage close;
  close.kind = StepMessageKind::kClose;
  close.ops = {{CacheOpKind::kPrefixDrop, 0, 5, 0}};
  auto close_back = serve::decode_step_message(serve::encode_step_message(close));
  ASSERT_TRUE(close_back.is_ok()) << close_back.status().to_string();
  EXPECT_EQ(*close_back, close);
}

TEST(StepMirrorMessage, EveryWordOutOfBoundsIsRefused) {
  const std::vector<int64_t> good = serve::encode_step_message(a_step());
  // Word positions: header 0-4, ops 5-20 (kind, sequence, entry, tokens), sequences 21-26, tokens 27-30.
  struct Case {
    const char* what;
    size_t word;
    int64_t value;
  };
  const std::vector<Case> cases = {
      {"kind", 0, 4},
      {"kind", 0, 0},
      {"last_only", 1, 2},
      {"op count", 2, 5},
      {"op count", 2, -1},
      {"op count", 2, std::numeric_limits<int64_t>::max() / 2},
      {"sequence count", 3, 3},
      {"token count", 4, 5},
      {"op kind", 5, 5},
      {"op kind", 5, 0},
      {"op sequence", 6, -1},
      {"op entry", 11, -2},
      {"op tokens", 12, -64},
      {"sequence id", 21, -1},
      {"sequence cached", 22, -1},
      {"sequence feeds", 23, -1},
      {"sequence feeds past the tokens", 26, 4},
      {"sequence feeds short of the tokens", 26, 2},
      {"token id", 28, -1},
      {"token id", 29, int64_t{1} << 31},
  };
  for (const Case& c : cases) {
    std::vector<int64_t> words = good;
    words[c.word] = c.value;
    EXPECT_FALSE(serve::decode_step_message(words).is_ok()) << c.what << " = " << c.value;
  }
  std::vector<int64_t> short_words(good.begin(), good.end() - 1);
  EXPECT_FALSE(serve::decode_step_message(short_words).is_ok());
  EXPECT_FALSE(serve::decode_step_message(std::span(good).first(4)).is_ok());
  // A keep-alive carries operations only, never a step.
  StepMessage keepalive = a_step();
  keepalive.kind = StepMessageKind::kKeepAlive;
  EXPECT_FALSE(serve::decode_step_message(serve::encode_step_message(keepalive)).is_ok());
}

// Two causal layers, blocks of 32 tokens; only the books (no K/V bytes are written).
struct Books {
  ModelSpec spec;
  std::shared_ptr<KvBlockPool> pool =
      std::make_shared<KvBlockPool>(8, 8, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 32});
  Books() {
    spec.n_layers = 2;
    spec.layers.resize(2);
  }
  int64_t allocated() const { return pool->stats().blocks_allocated; }
};

void feed(KvCache& cache, int64_t tokens) {
  std::vector<int64_t> slots;
  KvBlockCopies copies;
  for (int64_t l = 0; l < cache.n_layers(); ++l) cache.append_slots(l, tokens, slots, copies);
  cache.commit(tokens);
}

TEST(FollowerCaches, ReplayRankZerosPrefixCacheSharingAndFreeingTheSameBlocks) {
  Books books;
  serve::FollowerCaches caches([&] { return KvCache(books.pool, books.spec); });
  auto first = caches.for_step(5, 0);
  ASSERT_TRUE(first.is_ok());
  feed(**first, 70);
  EXPECT_EQ(books.allocated(), 2 * 3);

  // An entry of the first two blocks shares them; a new sequence forked from it shares them too.
  ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixInsert, 5, 0, 64}).is_ok());
  ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixFork, 6, 0, 64}).is_ok());
  EXPECT_EQ(books.allocated(), 2 * 3);
  EXPECT_EQ(caches.entries(), 1u);
  EXPECT_EQ(caches.sequences(), 2u);
  auto forked = caches.for_step(6, 64);
  ASSERT_TRUE(forked.is_ok());
  EXPECT_EQ((*forked)->length(), 64);
  feed(**forked, 1);  // a new third block of its own
  EXPECT_EQ(books.allocated(), 2 * 4);

  // What names nothing held here, or makes what exists, is refused.
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixInsert, 5, 0, 64}).is_ok());  // entry 0 exists
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixInsert, 8, 1, 32}).is_ok());  // no sequence 8
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixInsert, 5, 1, 96}).is_ok());  // holds 70 tokens
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixFork, 6, 0, 32}).is_ok());    // sequence 6 exists
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixFork, 7, 3, 32}).is_ok());    // no entry 3
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixFork, 7, 0, 65}).is_ok());    // the entry holds 64
  EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixDrop, 0, 3, 0}).is_ok());     // no entry 3
  EXPECT_FALSE(caches.for_step(6, 66).is_ok());                                // holds 65 tokens
  EXPECT_EQ(caches.entries(), 1u);
  EXPECT_EQ(caches.sequences(), 2u);

  // Rank 0 rolled a step back: cut back to the length it sends.
  auto rolled_back = caches.for_step(5, 40);
  ASSERT_TRUE(rolled_back.is_ok());
  EXPECT_EQ((*rolled_back)->length(), 40);

  // Released and dropped, in any order: every block comes back.
  ASSERT_TRUE(caches.apply({CacheOpKind::kRelease, 5, 0, 0}).is_ok());
  ASSERT_TRUE(caches.apply({CacheOpKind::kRelease, 5, 0, 0}).is_ok());  // nothing left: nothing to do
  ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixDrop, 0, 0, 0}).is_ok());
  EXPECT_EQ(books.allocated(), 2 * 3);
  ASSERT_TRUE(caches.apply({CacheOpKind::kRelease, 6, 0, 0}).is_ok());
  EXPECT_EQ(books.allocated(), 0);
  EXPECT_EQ(caches.entries(), 0u);
  EXPECT_EQ(caches.sequences(), 0u);
}

// A follower of a hybrid model (Qwen3-Next's golden): the forward it replays saves each sequence's
// recurrent state at the last whole block, so an entry rank 0 makes at a whole block holds that state;
// an entry at a length without a snapshot (rank 0 never makes one) is refused; a sequence forked from
// the entry gives the logits of the sequence it came from, fed the same tokens, to the last bit;
// everything comes back to the pool.
TEST(FollowerCaches, ReplayAHybridModelsEntriesWithTheRecurrentStateAtTheirEnd) {
  auto model = load_model(golden_model_dir("qwen3-next"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  BackendOptions bo;
  bo.n_threads = 2;
  bo.quiet = true;
  auto backend = open_backend("cpu", bo);
  ASSERT_TRUE(backend.is_ok());
  EngineOptions eo;
  eo.kv_dtype = KvDtype::kF32;
  auto engine = Engine::create(model->spec, model->weights, **backend, eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  Engine& e = **engine;
  auto run = [&](KvCache& cache, std::span<const int32_t> ids) {
    const SequenceStep s{&cache, ids};
    auto logits = e.forward(std::span(&s, 1), true);
    EXPECT_TRUE(logits.is_ok()) << logits.status().to_string();
    return logits.is_ok() ? copy_matrix(*logits) : FloatMatrix();
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; ++i) prompt.push_back((i * 13 + 7) % 250);
  const std::span<const int32_t> all(prompt);
  {
    serve::FollowerCaches caches([&] { return e.new_cache(); });
    auto first = caches.for_step(5, 0);
    ASSERT_TRUE(first.is_ok());
    run(**first, all.first(64));  // ends on a whole block: the state saved there
    const FloatMatrix want = run(**first, all.subspan(64));
    EXPECT_EQ((*first)->snapshot_tokens(), 64);
    ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixInsert, 5, 0, 64}).is_ok());
    EXPECT_FALSE(caches.apply({CacheOpKind::kPrefixInsert, 5, 1, 32}).is_ok());  // no state at 32
    ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixFork, 6, 0, 64}).is_ok());
    auto forked = caches.for_step(6, 64);
    ASSERT_TRUE(forked.is_ok());
    const FloatMatrix got = run(**forked, all.subspan(64));
    ASSERT_EQ(got.data.size(), want.data.size());
    EXPECT_EQ(got.data, want.data);
    ASSERT_TRUE(caches.apply({CacheOpKind::kRelease, 5, 0, 0}).is_ok());
    ASSERT_TRUE(caches.apply({CacheOpKind::kPrefixDrop, 0, 0, 0}).is_ok());
    ASSERT_TRUE(caches.apply({CacheOpKind::kRelease, 6, 0, 0}).is_ok());
  }
  EXPECT_EQ(e.kv_pool().stats().blocks_allocated, 0);
  EXPECT_EQ(e.kv_pool().stats().state_blocks_allocated, 0);
}

}  // namespace
}  // namespace day0::testing
