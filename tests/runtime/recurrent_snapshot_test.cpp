// The recurrent state (Gated DeltaNet, Mamba-2) as a kind of cache block, on every hybrid golden: a step
// that passes a whole-block boundary saves the state there; a fork cut back to that boundary restores it
// bit for bit (the state bytes and the logits that follow equal those of a sequence fed the same steps
// without the cache); checkpoint() and truncate() roll speculative tokens back; a failed step goes back
// to its snapshot; the pool counts state blocks, shares them on fork and frees them with their holders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "cache_steps.h"
#include "day0/backends/kernel_list.h"
#include "day0/model/model_memory.h"
#include "golden.h"

namespace day0::testing {
namespace {

const char* const kHybrids[] = {"qwen3-next", "qwen3.5",          "qwen3.5-moe",
                                "nemotron-h", "nemotron-3-super", "olmo-hybrid"};

using namespace cache_steps;  // NOLINT(google-build-using-namespace): the tests' step vocabulary

// A prompt of 30 tokens in blocks of 8.
//  - Fed in two steps (24, then 6): the first step ends on a boundary and saves the state there. A fork
//    cut back to 24 (a prefix-cache entry) holds that snapshot as its state, and fed the same 6 tokens
//    gives the logits of the sequence's own second step, bit for bit.
//  - Fed in one step: the recurrent kernels run in two calls around 24 and save the state there
//    mid-step; a fork cut back to 24 and fed the 6 tokens gives the two-step sequence's logits, bit for
//    bit, wherever the layers before a recurrent one compute rows 0..23 the same in a step of 30 rows as
//    in one of 24 (every hybrid golden but Nemotron-3-Super, whose MoE does not: there within float
//    tolerance). The one-step prefill's own last row is within float tolerance of the two-step one (a
//    6-row step may take other kernel paths than a 30-row one).
TEST(RecurrentSnapshot, AForkCutBackToTheLastWholeBlockRestoresTheStateBitForBit) {
  for (const char* name : kHybrids) {
    SCOPED_TRACE(name);
    auto run = open_golden(name, "cpu", exact_options(8));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    Engine& e = *run->engine;
    const std::vector<int32_t> prompt = tokens(30, 1, static_cast<int>(run->model.spec.vocab_size));
    const std::span<const int32_t> all(prompt);

    KvCache two_steps = e.new_cache();
    step(e, two_steps, all.first(24));
    EXPECT_EQ(two_steps.snapshot_tokens(), 24);  // a step that ends on a boundary saves there too
    KvCache at24 = two_steps.fork();             // the state after exactly 24 tokens, kept aside
    const FloatMatrix want = step(e, two_steps, all.subspan(24));
    EXPECT_EQ(two_steps.snapshot_tokens(), 24);  // (24, 30] holds no boundary

    KvCache entry = two_steps.fork();
    ASSERT_TRUE(entry.truncate(24).is_ok());
    EXPECT_EQ(entry.state_blocks_held(), 1) << "the restored state is the snapshot's block";
    const uint64_t bytes = entry.state_bytes();
    ASSERT_GT(bytes, 0u);
    // The restored block holds the bytes of the state after 24 tokens (the first layer's state starts
    // the block: the whole block from there).
    KvCache probe = entry.fork();
    RecurrentLayerState got{}, ref{};
    for (int64_t l = 0; l < probe.n_layers() && got.tokens == nullptr; ++l) {
      got = probe.recurrent(l);
      ref = at24.recurrent(l);
    }
    ASSERT_NE(got.tokens, nullptr);
    EXPECT_EQ(*got.tokens, 24);
    EXPECT_EQ(std::memcmp(got.state, ref.state, bytes), 0);
    KvCache hit = entry.fork();
    EXPECT_TRUE(same_bits(step(e, hit, all.subspan(24)), want)) << "logits after a restored snapshot differ";

    KvCache whole = e.new_cache();
    const FloatMatrix one_step = step(e, whole, all);
    EXPECT_EQ(whole.snapshot_tokens(), 24);
    EXPECT_TRUE(whole.can_truncate(24));
    EXPECT_FALSE(whole.can_truncate(16));  // no snapshot there
    EXPECT_FALSE(whole.can_truncate(29));
    KvCache mid = whole.fork();
    ASSERT_TRUE(mid.truncate(24).is_ok());
    const FloatMatrix from_mid = step(e, mid, all.subspan(24));
    const bool row_invariant = std::string(name) != "nemotron-3-super";
    if (row_invariant) {
      EXPECT_TRUE(same_bits(from_mid, want))
          << "a snapshot taken mid-step differs: " << max_diff(from_mid, want);
    } else {
      EXPECT_LE(max_diff(from_mid, want), 1e-4);
    }
    EXPECT_LE(max_diff(one_step, want), 1e-4);
  }
}

// Decode passes block boundaries one token at a time: the snapshot follows the last one passed.
TEST(RecurrentSnapshot, DecodeStepsMoveTheSnapshotToTheLastWholeBlock) {
  auto run = open_golden("qwen3.5", "cpu", exact_options(4));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& e = *run->engine;
  const std::vector<int32_t> prompt = tokens(6, 2, 256);
  KvCache cache = e.new_cache();
  step(e, cache, prompt);
  EXPECT_EQ(cache.snapshot_tokens(), 4);
  for (int i = 0; i < 5; ++i) {
    const int32_t t = 40 + i;
    step(e, cache, std::span(&t, 1));
  }
  EXPECT_EQ(cache.length(), 11);
  EXPECT_EQ(cache.snapshot_tokens(), 8);
  EXPECT_TRUE(cache.can_truncate(8));
  EXPECT_FALSE(cache.can_truncate(4));
  EXPECT_FALSE(cache.can_truncate(9));
  EXPECT_TRUE(cache.can_truncate(0));
  EXPECT_TRUE(cache.can_truncate(11));
}

// Speculative decoding's rollback: checkpoint, feed draft tokens (crossing a block boundary, which
// moves the whole-block snapshot but not the checkpoint), go back, feed what was accepted: the same
// logits as a sequence that never saw the draft.
TEST(RecurrentSnapshot, ACheckpointRollsDraftTokensBack) {
  for (const char* name : {"qwen3.5", "nemotron-h"}) {
    SCOPED_TRACE(name);
    auto run = open_golden(name, "cpu", exact_options(8));
    ASSERT_TRUE(run.is_ok()) << run.status().to_string();
    Engine& e = *run->engine;
    const std::vector<int32_t> prompt = tokens(13, 3, 256);
    const std::vector<int32_t> draft = {7, 8, 9, 10}, accepted = {7, 99};
    KvCache clean = e.new_cache();
    step(e, clean, prompt);
    const FloatMatrix want = step(e, clean, accepted);

    KvCache spec = e.new_cache();
    step(e, spec, prompt);
    const uint64_t blocks_before = e.kv_pool().stats().state_blocks_allocated;
    spec.checkpoint();
    EXPECT_EQ(spec.checkpoint_tokens(), 13);
    EXPECT_EQ(e.kv_pool().stats().state_blocks_allocated, blocks_before) << "a checkpoint is free when taken";
    step(e, spec, draft);  // 13 -> 17: passes 16
    EXPECT_EQ(spec.snapshot_tokens(), 16);
    EXPECT_FALSE(spec.can_truncate(14));
    ASSERT_TRUE(spec.truncate(13).is_ok());
    EXPECT_EQ(spec.snapshot_tokens(), -1) << "the snapshot at 16 is past the cut (it replaced the one at 8)";
    const FloatMatrix got = step(e, spec, accepted);
    EXPECT_TRUE(same_bits(got, want));
    spec.drop_checkpoint();
    EXPECT_EQ(spec.checkpoint_tokens(), -1);
    // Without a snapshot there, going back loses the state: the next step refuses to run.
    const Status lost = spec.truncate(14);
    EXPECT_EQ(lost.code(), StatusCode::kFailedPrecondition) << lost.to_string();
    EXPECT_TRUE(spec.state_lost());
    const int32_t t = 5;
    const SequenceStep s{&spec, std::span(&t, 1)};
    EXPECT_FALSE(e.forward(std::span(&s, 1), true).is_ok());
    ASSERT_TRUE(spec.truncate(0).is_ok());
    EXPECT_FALSE(spec.state_lost());
  }
}

// The pool's books: a new sequence takes one state block; a step that saves a snapshot one more; a
// fork shares both until it writes; a fork cut back to the snapshot holds that block alone; every block
// goes back with its last holder.
TEST(RecurrentSnapshot, ThePoolCountsStateBlocksSharesThemAndFreesThem) {
  auto run = open_golden("qwen3-next", "cpu", exact_options(8));
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& e = *run->engine;
  const KvBlockPool& pool = e.kv_pool();
  {
    KvCache a = e.new_cache();
    const uint64_t per = pool.state_block_bytes();  // set by the first cache
    EXPECT_EQ(a.state_bytes(), recurrent_state_bytes_per_sequence(run->model.spec, KvDtype::kF32));
    EXPECT_EQ(per % 64, 0u);
    EXPECT_GE(per, a.state_bytes());
    EXPECT_EQ(pool.stats().state_blocks_allocated, 1);
    EXPECT_EQ(pool.stats().state_bytes_allocated, per);
    step(e, a, tokens(5, 4, 256));  // no boundary passed
    EXPECT_EQ(pool.stats().state_blocks_allocated, 1);
    step(e, a, tokens(5, 5, 256));  // passes 8
    EXPECT_EQ(pool.stats().state_blocks_allocated, 2);
    KvCache b = a.fork();
    EXPECT_EQ(pool.stats().state_blocks_allocated, 2);
    EXPECT_EQ(b.state_blocks_held(), 2);
    const int32_t t = 9;
    step(e, b, std::span(&t, 1));  // writes: its live state is copied first
    EXPECT_EQ(pool.stats().state_blocks_allocated, 3);
    KvCache entry = a.fork();
    ASSERT_TRUE(entry.truncate(8).is_ok());
    EXPECT_EQ(entry.state_blocks_held(), 1);
    EXPECT_EQ(pool.stats().state_blocks_allocated, 3);
    a = e.new_cache();  // a's blocks: the snapshot stays (b and entry hold it), its live state goes
    EXPECT_EQ(pool.stats().state_blocks_allocated, 3);
  }
  EXPECT_EQ(pool.stats().state_blocks_allocated, 0);
  EXPECT_EQ(pool.stats().blocks_allocated, 0);
}

// Forwards every kernel; the gated delta rule throws while `fail` is set (a step that fails after the
// conv windows and earlier layers advanced).
class FailingScan final : public Backend {
 public:
  explicit FailingScan(Backend& inner) : inner_(inner) {}
  bool fail = false;
  std::string_view name() const override { return inner_.name(); }
  ThreadPool* thread_pool() override { return inner_.thread_pool(); }
  bool supports(const OpKey& key) const override { return inner_.supports(key); }
  void synchronize() override { inner_.synchronize(); }
#define D0_FAIL_FORWARD(method, Args, op_name) \
  void method(const Args& a) override {        \
    hook(a);                                   \
    inner_.method(a);                          \
  }
  D0_FOR_EACH_KERNEL(D0_FAIL_FORWARD)
#undef D0_FAIL_FORWARD

 private:
  template <class Args>
  void hook(const Args&) {}
  void hook(const GatedDeltaRuleArgs&) {
    if (fail) throw std::runtime_error("injected failure");
  }
  Backend& inner_;
};

// A step that fails part-way is rolled back by the engine: a sequence whose state advanced goes back to
// its snapshot when the step started on one (then the retry gives the same logits), and is marked lost
// otherwise.
TEST(RecurrentSnapshot, AFailedStepGoesBackToTheSnapshotItStartedOn) {
  auto run = open_golden("qwen3-next", "cpu");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  FailingScan backend(*run->backend);
  auto engine = Engine::create(run->model.spec, run->model.weights, backend, exact_options(8));
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  Engine& e = **engine;
  const std::vector<int32_t> prompt = tokens(16, 6, 256), next = {3, 4, 5};
  KvCache clean = e.new_cache();
  step(e, clean, prompt);
  const FloatMatrix want = step(e, clean, next);

  KvCache c = e.new_cache();
  step(e, c, prompt);  // ends on 16: its snapshot
  backend.fail = true;
  const SequenceStep s{&c, next};
  auto failed = e.forward(std::span(&s, 1), true);
  EXPECT_FALSE(failed.is_ok());
  EXPECT_FALSE(c.state_lost());
  EXPECT_EQ(c.length(), 16);
  backend.fail = false;
  EXPECT_TRUE(same_bits(step(e, c, next), want));

  KvCache d = e.new_cache();
  step(e, d, std::span(prompt).first(13));  // snapshot at 8, length 13
  backend.fail = true;
  const SequenceStep s2{&d, std::span(prompt).subspan(13)};
  EXPECT_FALSE(e.forward(std::span(&s2, 1), true).is_ok());
  EXPECT_TRUE(d.state_lost());
  EXPECT_EQ(d.length(), 13);
  backend.fail = false;
  ASSERT_TRUE(d.truncate(d.snapshot_tokens()).is_ok());  // what the scheduler does: back to 8
  step(e, d, std::span(prompt).subspan(8));
  EXPECT_TRUE(same_bits(step(e, d, next), want));
}

}  // namespace
}  // namespace day0::testing
