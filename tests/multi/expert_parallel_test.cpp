// Expert parallelism over two ranks against one process, on the committed golden MoE miniatures: each
// rank binds only its block of every layer's routed experts (the rest of the model whole), the logits
// of a prompt agree within float32 tolerance under the all-reduce combine and exactly under the
// all-to-all one, and greedy tokens are identical; MoE layers under tensor parallelism (expert-TP)
// likewise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/dist/expert_placement.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};

LogitDiff compare_logits(Opened& whole, Opened& part) {
  return day0::testing::compare_logits(whole, part, kPrompt);
}

struct Case {
  std::string model;
  MoeCombine combine;
};
std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  std::string n = p.param.model + (p.param.combine == MoeCombine::kAllToAll ? "_all_to_all" : "_all_reduce");
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
}

std::string model_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
}

class ExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam().model, 1, 1);
  Opened part = open_model(GetParam().model, 1, 2, GetParam().combine);
  ASSERT_TRUE(whole.engine && part.engine);
  const LogitDiff d = compare_logits(whole, part);
  // Float32 throughout. All-reduce: the partial sums are added in another order. All-to-all: each row's
  // expert outputs are added in expert order, as one process adds them: the same floats.
  if (GetParam().combine == MoeCombine::kAllToAll) {
    EXPECT_EQ(d.max_diff, 0.0) << "max |logit| " << d.max_abs;
  } else {
    EXPECT_LT(d.max_diff, 1e-5 * std::max(1.0, d.max_abs)) << "max |logit| " << d.max_abs;
  }
  EXPECT_GT(d.max_abs, 0.1);  // the comparison compared something

  SamplingParams greedy;
  auto wg = generate(*whole.engine, kPrompt, 12, greedy);
  auto pg = generate(*part.engine, kPrompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 12u);
}

// Attention data parallelism: each rank runs its own sequences (rank 0 one prompt, rank 1 a batch of
// two of other lengths), its MoE layers exchanging picks with the other rank's; prefill logits and 8
// greedy decode steps equal one process running the same sequences.
class DataParallelAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(DataParallelAttention, EachRanksOwnSequencesEqualOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 1, 2, MoeCombine::kAllToAll, ActivationPrecision::kF32, true);
  ASSERT_TRUE(whole.engine && part.engine);
  const int rank = test_world()->rank();
  // This rank's prompts: different row counts on the two ranks at every prefill.
  const std::vector<std::vector<int32_t>> prompts =
      rank == 0 ? std::vector<std::vector<int32_t>>{kPrompt}
                : std::vector<std::vector<int32_t>>{{5, 9, 77, 180, 33}, {2, 250, 14, 61, 8, 99, 120, 3}};
  // Runs `e` on this rank's sequences: the prefill, then 8 greedy steps; returns every step's logits of
  // each sequence's last token, flattened [steps, sequences, vocab].
  auto run = [&](Engine& e) {
    std::vector<KvCache> caches;
    for (size_t i = 0; i < prompts.size(); ++i) caches.push_back(e.new_cache());
    std::vector<std::vector<int32_t>> next = prompts;
    std::vector<float> all;
    for (int step = 0; step < 9; ++step) {
      std::vector<SequenceStep> batch;
      for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({&caches[i], next[i]});
      auto logits = e.forward(batch, /*last_only=*/true);  // [sequences, vocab]
      EXPECT_TRUE(logits.is_ok()) << logits.status().to_string();
      if (!logits.is_ok()) return all;
      for (size_t i = 0; i < prompts.size(); ++i) {
        const float* row = logits->row(static_cast<int64_t>(i));
        all.insert(all.end(), row, row + logits->cols);
        next[i] = {static_cast<int32_t>(std::max_element(row, row + logits->cols) - row)};
      }
    }
    return all;
  };
  const std::vector<float> expected = run(*whole.engine);
  const std::vector<float> got = run(*part.engine);
  ASSERT_EQ(got.size(), expected.size());
  ASSERT_EQ(got.size(), 9 * prompts.size() * static_cast<size_t>(whole.model.spec.vocab_size));
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - expected[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(expected[i])));
  }
  // Each row's expert outputs are added in expert order, as one process adds them.
  EXPECT_LT(max_diff, 1e-5 * std::max(1.0, max_abs)) << "rank " << rank << " max |logit| " << max_abs;
  EXPECT_GT(max_abs, 0.1);
}

INSTANTIATE_TEST_SUITE_P(GqaMlaMoe, DataParallelAttention,
                         ::testing::Values("qwen3-moe", "deepseek-v3", "gpt-oss", "qwen2-moe",
                                           "longcat-flash"),
                         model_name);

TEST(DataParallelAttentionEngine, RefusesLayoutsItCannotRunSayingWhat) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model("qwen3-moe", 1, 1);
  Opened part = open_model("qwen3-moe", 1, 2, MoeCombine::kAllToAll);
  ASSERT_TRUE(whole.engine && part.engine);
  EngineOptions eo;
  eo.data_parallel_attention = true;
  eo.moe_combine = MoeCombine::kAllToAll;
  auto one = Engine::create(whole.model.spec, whole.model.weights, *whole.backend, eo);  // no EP
  ASSERT_FALSE(one.is_ok());
  EXPECT_NE(one.status().message().find("found EP 1"), std::string::npos) << one.status().to_string();
  eo.expert_parallel = part.groups.ep.get();
  eo.moe_group = part.groups.stage.get();
  eo.moe_combine = MoeCombine::kAllReduce;
  auto reduce = Engine::create(part.model.spec, part.model.weights, *part.backend, eo);
  ASSERT_FALSE(reduce.is_ok());
  EXPECT_NE(reduce.status().message().find("combine all-reduce"), std::string::npos)
      << reduce.status().to_string();
  eo.moe_combine = MoeCombine::kAllToAll;
  EXPECT_TRUE(Engine::create(part.model.spec, part.model.weights, *part.backend, eo).is_ok());
}

class ExpertParallelBinding : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertParallelBinding, EachRankBindsItsBlockOfExpertsAndTheRestWhole) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 1, 2);
  ASSERT_TRUE(whole.engine && part.engine);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  const int64_t n_experts = whole.model.spec.moe->n_experts;
  ASSERT_EQ(n_experts % 2, 0);
  // Half of the experts' bytes, everything else whole.
  EXPECT_GT(all.experts, 0u);
  EXPECT_EQ(2 * mine.experts, all.experts);
  EXPECT_EQ(mine.split - mine.experts, all.split - all.experts);
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_EQ(mine.total() + mine.experts, all.total());
  const dist::ExpertBlock held = dist::expert_block(n_experts, 2, w.rank());
  EXPECT_EQ(held.begin, w.rank() * n_experts / 2);
  for (size_t l = 0; l < part.model.weights->layers.size(); ++l) {
    const MoeWeights& moe = part.model.weights->layers[l].moe;
    if (!whole.model.spec.layers[l].moe) {
      EXPECT_TRUE(moe.experts.empty());
      continue;
    }
    EXPECT_EQ(moe.expert_of_slot(0), held.begin) << "layer " << l;
    EXPECT_EQ(moe.expert_slot[static_cast<size_t>(held.begin)], 0) << "layer " << l;
    ASSERT_EQ(static_cast<int64_t>(moe.experts.size()), held.size()) << "layer " << l;
    // The same expert's weights as one process binds (a view of the same checkpoint bytes).
    const ExpertWeights& first = moe.experts.front();
    const ExpertWeights& same = whole.model.weights->layers[l].moe.experts[static_cast<size_t>(held.begin)];
    EXPECT_EQ(first.down.name, same.down.name) << "layer " << l;
    EXPECT_EQ(first.down.rows, same.down.rows);
    EXPECT_EQ(first.down.cols, same.down.cols);
  }
  // Attention is replicated: every KV head cached on every rank.
  EXPECT_EQ(part.engine->kv_pool().bytes_per_token_row(), whole.engine->kv_pool().bytes_per_token_row());
  // Both ranks hold the same amount (the blocks are equal here).
  const uint64_t total = mine.total();
  std::vector<uint64_t> both(2);
  ASSERT_TRUE(w.all_gather_of<uint64_t>(std::span(&total, 1), both).is_ok());
  EXPECT_EQ(both[0], both[1]);
}

TEST_P(ExpertParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam().model, 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam().model, 1, 2, GetParam().combine, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

// Every GQA MoE family with a golden miniature: qwen2-moe has a sigmoid-gated shared expert and a dense
// layer between its MoE ones, gpt-oss MXFP4 experts stacked in one tensor with biases, llama4-text
// stacked experts, input scaling and a shared expert, glm-4.5 a correction bias and shared experts;
// qwen3-next Gated DeltaNet layers (replicated, each rank its own recurrent state) beside gated attention;
// longcat-flash zero-computation experts (added once) and its shortcut MoE beside MLA.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* m : {"qwen3-moe", "mixtral", "qwen2-moe", "gpt-oss", "llama4-text", "minimax-m2",
                        "glm-4.5", "qwen3-next", "longcat-flash"})
    for (MoeCombine c : {MoeCombine::kAllReduce, MoeCombine::kAllToAll}) out.push_back({m, c});
  return out;
}
INSTANTIATE_TEST_SUITE_P(GqaMoe, ExpertParallel, ::testing::ValuesIn(cases()), case_name);

INSTANTIATE_TEST_SUITE_P(GqaMoe, ExpertParallelBinding,
                         ::testing::Values("qwen3-moe", "mixtral", "qwen2-moe"), model_name);

// MoE layers under tensor parallelism: every expert's width (and the shared expert's) split in two.
class MoeTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeTensorParallel, LogitsAndGreedyTokensMatchOneProcessAndEachRankHoldsHalf) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  const LogitDiff d = compare_logits(whole, part);
  EXPECT_LT(d.max_diff, 1e-5 * std::max(1.0, d.max_abs)) << "max |logit| " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);
  SamplingParams greedy;
  auto wg = generate(*whole.engine, kPrompt, 12, greedy);
  auto pg = generate(*part.engine, kPrompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  if (whole.model.spec.weights.format == WeightFormat::kFp8Block) {
    // FP8 parts carry their own re-blocked scale grids: a few floats a tensor over half.
    for (auto [part_bytes, whole_bytes] :
         {std::pair{mine.experts, all.experts}, std::pair{mine.split, all.split}}) {
      EXPECT_GE(2 * part_bytes, whole_bytes);
      EXPECT_LT(static_cast<double>(2 * part_bytes), 1.02 * static_cast<double>(whole_bytes));
    }
  } else {
    EXPECT_EQ(2 * mine.experts, all.experts);
    EXPECT_EQ(2 * mine.split, all.split);
  }
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_EQ(2 * part.engine->local_spec().moe->expert_intermediate,
            whole.engine->spec().moe->expert_intermediate);
  // Gated DeltaNet: each rank keeps the recurrent state of its key heads only.
  if (whole.model.spec.linear_attention) {
    EXPECT_GT(whole.engine->new_cache().state_bytes(), 0u);
    EXPECT_EQ(2 * part.engine->new_cache().state_bytes(), whole.engine->new_cache().state_bytes());
  }
}

TEST_P(MoeTensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam(), 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

// minimax-m2: its q / k RMSNorm over all heads sums the ranks' squares; glm-4.5: partial RoPE, a
// correction bias, shared experts and a dense first layer; qwen3-next: Gated DeltaNet layers split by
// key heads (q_proj's output gate with its heads).
INSTANTIATE_TEST_SUITE_P(GqaMoe, MoeTensorParallel,
                         ::testing::Values("qwen3-moe", "qwen2-moe", "mixtral", "minimax-m2", "glm-4.5",
                                           "qwen3-next", "longcat-flash"),
                         model_name);

TEST(ExpertParallelEngine, RefusesExpertsWithoutTheirGroup) {
  D0_REQUIRE_TWO_RANKS();
  LoadOptions lo;
  lo.experts = {test_world()->rank(), 2};
  auto m = load_model(golden("qwen3-moe"), lo);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto be = open_backend("cpu", {});
  ASSERT_TRUE(be.is_ok());
  auto e = Engine::create(m->spec, m->weights, **be, {});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("missing"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace day0::testing
