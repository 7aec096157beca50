// Experts stacked in one tensor under tensor parallelism (expert-TP): gpt-oss (attention sinks split
// with their heads, sliding layers, biased clamped experts in MXFP4), Llama 4 (BF16 experts stored
// x @ W with gate and up concatenated) and Mistral 4 (stored as nn.Linear weights [E, 2I, H] / [E, H, I]),
// against one process over two ranks, and TP 2 x EP 2 over four.
// The gpt-oss miniature's 32-wide experts split inside an MXFP4 group (its parts are exact BF16); a
// 64-wide one written here splits on group boundaries (its parts stay MXFP4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "day0/model/catalog.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/synth/synth_checkpoint.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};
constexpr const char* kWideGptOss = "gpt-oss-64";  // written by wide_gpt_oss()

// The gpt-oss miniature with 64-wide experts (two MXFP4 groups), written once per rank (the same seed
// on every rank: the same bytes) under /tmp; its absolute path.
struct RemovedAtExit {
  std::string dir;
  ~RemovedAtExit() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

std::string wide_gpt_oss() {
  static const RemovedAtExit written{[] {
    const std::string out = fmt::format("/tmp/day0-multi-gpt-oss-64-{}", getpid());
    std::filesystem::remove_all(out);
    auto r = resolve_model(golden("gpt-oss"));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return std::string();
    ModelSpec spec = r->spec;
    spec.intermediate_size = 64;
    spec.moe->expert_intermediate = 64;
    auto synth = write_synthetic_checkpoint(spec, SynthOptions{.seed = 7}, out);
    EXPECT_TRUE(synth.is_ok()) << synth.status().to_string();
    return out;
  }()};
  return written.dir;
}

// The first MoE layer's weights.
const MoeWeights& first_moe(const Opened& o) {
  size_t l = 0;
  while (l + 1 < o.model.spec.layers.size() && !o.model.spec.layers[l].moe) ++l;
  return o.model.weights->layers[l].moe;
}

std::string path_of(const std::string& model) {
  return model == kWideGptOss ? wide_gpt_oss() : model;
}

std::string name_of(std::string n) {
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

void expect_same_outputs(Opened& whole, Opened& part) {
  const LogitDiff d = compare_logits(whole, part, kPrompt);
  EXPECT_LT(d.max_diff, 1e-5 * std::max(1.0, d.max_abs)) << "max |logit| " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);  // the comparison compared something
  SamplingParams greedy;
  auto wg = generate(*whole.engine, kPrompt, 12, greedy);
  auto pg = generate(*part.engine, kPrompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 12u);
}

class StackedExpertsTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(StackedExpertsTensorParallel, LogitsGreedyTokensAndBytesMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  Opened whole = open_model(path_of(GetParam()), 1, 1);
  Opened part = open_model(path_of(GetParam()), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  // Attention (q / k / v / o, their biases and the sinks by heads) and the vocabulary halve.
  EXPECT_EQ(2 * (mine.split - mine.experts), all.split - all.experts);
  // o_proj's bias is added by TP rank 0 alone.
  if (w.rank() == 0) {
    EXPECT_EQ(mine.replicated, all.replicated);
  } else {
    EXPECT_LE(mine.replicated, all.replicated);
  }
  EXPECT_EQ(2 * part.engine->local_spec().moe->expert_intermediate,
            whole.model.spec.moe->expert_intermediate);
  const ExpertWeights& e = first_moe(part).experts[0];
  const ExpertWeights& same = first_moe(whole).experts[0];
  EXPECT_EQ(2 * e.gate.rows, same.gate.rows);  // [2I / 2, H]: its gate and up rows
  EXPECT_EQ(2 * e.down.cols, same.down.cols);  // [H, I / 2]
  // Each expert's bytes over the two ranks: exactly the whole where the split keeps the format (the
  // down bias on rank 0 alone); the 32-wide MXFP4 down projection's halves are BF16 copies.
  const uint64_t experts = mine.experts;
  std::vector<uint64_t> both(2);
  ASSERT_TRUE(w.all_gather_of<uint64_t>(std::span(&experts, 1), both).is_ok());
  const bool group_split = GetParam() == "gpt-oss";
  if (group_split) {
    EXPECT_EQ(e.down.format, WeightFormat::kBF16);
    EXPECT_GT(both[0] + both[1], all.experts);
    EXPECT_LT(mine.experts, all.experts);
  } else {
    EXPECT_EQ(e.down.format, same.down.format);
    EXPECT_EQ(both[0] + both[1], all.experts);
  }
}

TEST_P(StackedExpertsTensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(path_of(GetParam()), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(path_of(GetParam()), 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

INSTANTIATE_TEST_SUITE_P(Stacked, StackedExpertsTensorParallel,
                         ::testing::Values("gpt-oss", kWideGptOss, "llama4-text", "mistral4"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return name_of(p.param); });

struct Case {
  std::string model;
  MoeCombine combine;
};

class FourRanksStackedExperts : public ::testing::TestWithParam<Case> {};

TEST_P(FourRanksStackedExperts, TensorTimesExpertParallelMatchesOneProcess) {
  D0_REQUIRE_FOUR_RANKS();
  Opened whole = open_model(path_of(GetParam().model), 1, 1);
  Opened part = open_model(path_of(GetParam().model), 2, 2, GetParam().combine);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_EQ(2 * (mine.split - mine.experts), all.split - all.experts);
  EXPECT_EQ(first_moe(part).experts.size() * 2, first_moe(whole).experts.size());
}

std::vector<Case> four_rank_cases() {
  std::vector<Case> out;
  for (const char* m : {"gpt-oss", kWideGptOss, "llama4-text", "mistral4"})
    for (MoeCombine c : {MoeCombine::kAllReduce, MoeCombine::kAllToAll}) out.push_back({m, c});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stacked, FourRanksStackedExperts, ::testing::ValuesIn(four_rank_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return name_of(p.param.model) +
                                  (p.param.combine == MoeCombine::kAllToAll ? "_all_to_all" : "_all_reduce");
                         });

}  // namespace
}  // namespace day0::testing
