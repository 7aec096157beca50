// Single-process pieces of distributed inference: the single-process communicator, layouts and rank
// coordinates, world-size checks, tensor-parallel shard ranges and specs, expert placement and the
// expert-parallel checks, pipeline stage assignment and each stage's binding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <vector>

#include "day0/dist/communicator.h"
#include "day0/dist/expert_placement.h"
#include "day0/dist/pipeline_stages.h"
#include "day0/dist/process_groups.h"
#include "day0/model/catalog.h"
#include "day0/model/model_spec.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/model_weights.h"

namespace day0::dist {
namespace {

TEST(SingleProcessCommunicator, CollectivesAreCopiesAndMessagesQueue) {
  auto c = make_single_process_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> x = {1.5f, -2.0f};
  ASSERT_TRUE(c->all_reduce_sum(x).is_ok());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f}));
  std::vector<int32_t> send = {7, 8, 9}, recv(3);
  ASSERT_TRUE(c->all_gather_of<int32_t>(send, recv).is_ok());
  EXPECT_EQ(recv, send);
  std::vector<int32_t> wrong(4);
  EXPECT_FALSE(c->all_gather_of<int32_t>(send, wrong).is_ok());
  const int64_t counts[] = {12};
  std::vector<std::byte> out(12);
  ASSERT_TRUE(c->all_to_all_v(std::as_bytes(std::span(send)), counts, out, counts).is_ok());
  EXPECT_EQ(std::memcmp(out.data(), send.data(), 12), 0);
  const int64_t too_many[] = {16};
  EXPECT_FALSE(c->all_to_all_v(std::as_bytes(std::span(send)), too_many, out, too_many).is_ok());
  // A message to itself is queued; a receive with nothing queued would block forever: an error.
  ASSERT_TRUE(c->send(std::as_bytes(std::span(send)), 0, 5).is_ok());
  std::vector<int32_t> got(3);
  ASSERT_TRUE(c->recv(std::as_writable_bytes(std::span(got)), 0, 5).is_ok());
  EXPECT_EQ(got, send);
  const Status empty = c->recv(std::as_writable_bytes(std::span(got)), 0, 5);
  EXPECT_EQ(empty.code(), StatusCode::kIoError);
  EXPECT_FALSE(c->send(std::as_bytes(std::span(send)), 1, 5).is_ok());
  EXPECT_TRUE(c->barrier().is_ok());
  EXPECT_EQ(c->stats().calls, 10);
}

TEST(ProcessGroups, CoordinatesPutTensorParallelRanksNextToEachOther) {
  const ParallelLayout layout{.tp = 2, .pp = 3, .ep = 2};
  EXPECT_EQ(layout.world(), 12);
  for (int r = 0; r < layout.world(); ++r) {
    const RankCoordinates c = coordinates_of(layout, r);
    EXPECT_EQ(rank_of(layout, c), r);
    EXPECT_LT(c.tp, 2);
    EXPECT_LT(c.ep, 2);
    EXPECT_LT(c.pp, 3);
  }
  EXPECT_EQ(coordinates_of(layout, 1), (RankCoordinates{.tp = 1, .pp = 0, .ep = 0}));
  EXPECT_EQ(coordinates_of(layout, 2), (RankCoordinates{.tp = 0, .pp = 0, .ep = 1}));
  EXPECT_EQ(coordinates_of(layout, 4), (RankCoordinates{.tp = 0, .pp = 1, .ep = 0}));
}

TEST(ProcessGroups, WorldSizeMismatchNamesBothNumbers) {
  const Status st = check_world_size({.tp = 3}, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("started 2 ranks"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("needs 3"), std::string::npos) << st.message();
  EXPECT_TRUE(check_world_size({.tp = 2, .pp = 2}, 4).is_ok());
  EXPECT_FALSE(check_world_size({.tp = 0}, 1).is_ok());
  EXPECT_FALSE(validate_layout({.tp = 4096, .pp = 2}).is_ok());
}

TEST(ProcessGroups, SingleProcessGroupsOfALayoutOfOne) {
  auto groups = make_process_groups(make_single_process_communicator(), {});
  ASSERT_TRUE(groups.is_ok()) << groups.status().to_string();
  EXPECT_EQ(groups->tp->size(), 1);
  EXPECT_EQ(groups->pp->size(), 1);
  EXPECT_EQ(groups->ep->size(), 1);
  EXPECT_EQ(groups->stage->size(), 1);
  EXPECT_FALSE(make_process_groups(make_single_process_communicator(), {.tp = 2}).is_ok());
}

TEST(ProcessGroups, WithoutMpiTheWorldIsRefusedWithTheReason) {
  if (mpi_available()) GTEST_SKIP() << "this build has MPI (tests/multi runs it)";
  auto world = open_mpi_world();
  ASSERT_FALSE(world.is_ok());
  EXPECT_NE(world.status().message().find("without MPI"), std::string::npos);
}

TEST(PipelineStages, ContiguousBalancedBlocksRunEveryLayerOnce) {
  for (int64_t n : {2, 3, 7, 61}) {
    for (int64_t pp = 1; pp <= n; ++pp) {
      int64_t next = 0;
      for (int64_t s = 0; s < pp; ++s) {
        const LayerBlock b = stage_layers(n, pp, s);
        EXPECT_EQ(b.begin, next);
        EXPECT_TRUE(b.size() == n / pp || b.size() == n / pp + 1) << n << " " << pp << " " << s;
        for (int64_t l = b.begin; l < b.end; ++l) EXPECT_EQ(stage_of_layer(n, pp, l), s);
        next = b.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  // DeepSeek-V3's 61 layers over 4 stages: 15, 15, 15, 16 (the first stage, with the embedding, is
  // never the longer one).
  EXPECT_EQ(stage_layers(61, 4, 0), (LayerBlock{0, 15}));
  EXPECT_EQ(stage_layers(61, 4, 3), (LayerBlock{45, 61}));
  EXPECT_EQ(stage_layers(3, 2, 0), (LayerBlock{0, 1}));
}

// Every stage of a split binds its layers only; together the stages bind the model once (an untied
// head), a tied head once more on the last stage.
TEST(PipelineStages, EachStageBindsOnlyItsLayersBytes) {
  for (const char* name : {"deepseek-v3", "qwen3"}) {
    const std::string path = std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
    auto whole = load_model(path);
    ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
    const int64_t n = whole->spec.n_layers;
    const bool tied = whole->spec.tie_word_embeddings;
    for (int pp = 2; pp <= n; ++pp) {
      uint64_t sum = 0;
      for (int s = 0; s < pp; ++s) {
        LoadOptions lo;
        lo.stage = {s, pp};
        auto part = load_model(path, lo);
        ASSERT_TRUE(part.is_ok()) << part.status().to_string();
        const ModelWeights& w = *part->weights;
        const LayerBlock b = stage_layers(n, pp, s);
        EXPECT_EQ(w.held_layers.begin, b.begin);
        EXPECT_EQ(w.held_layers.end, b.end);
        for (int64_t l = 0; l < n; ++l)
          EXPECT_EQ(w.layers[static_cast<size_t>(l)].input_norm.empty(), !b.contains(l)) << name << " " << l;
        EXPECT_EQ(w.embedding.data != nullptr, s == 0);
        EXPECT_EQ(w.lm_head.present(), s == pp - 1);
        sum += w.bound.total();
      }
      const WeightView& e = whole->weights->embedding;
      const uint64_t head_again = tied ? static_cast<uint64_t>(e.rows * e.cols) * 2 : 0;  // BF16
      EXPECT_EQ(sum, whole->weights->bound.total() + head_again) << name << " over " << pp;
    }
  }
  LoadOptions bad;
  bad.stage = {0, 3};
  EXPECT_EQ(load_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3", bad).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace day0::dist

namespace day0 {
namespace {

TEST(TensorShard, RangesSplitEvenlyAndTheVocabularyRoundsUp) {
  EXPECT_EQ(even_shard(128, {1, 2}).begin, 64);
  EXPECT_EQ(even_shard(128, {1, 2}).end, 128);
  const ShardRange last = vocab_shard(10, {2, 3});  // shares of 4: [0,4) [4,8) [8,10)
  EXPECT_EQ(last.begin, 8);
  EXPECT_EQ(last.end, 10);
  EXPECT_EQ(vocab_shard_rows(10, {0, 3}), 4);
  // 2 KV heads of 16 over 4 ranks: ranks 0-1 read head 0, ranks 2-3 head 1.
  EXPECT_EQ(kv_head_shard(32, 2, {1, 4}).begin, 0);
  EXPECT_EQ(kv_head_shard(32, 2, {2, 4}).begin, 16);
  EXPECT_EQ(kv_head_shard(32, 2, {3, 4}).end, 32);
  EXPECT_EQ(kv_head_shard(32, 2, {1, 2}).begin, 16);
}

ModelSpec dense_spec() {
  ModelSpec s;
  s.family = "llama";
  s.n_layers = 2;
  s.hidden_size = 64;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 16;
  s.intermediate_size = 128;
  s.vocab_size = 256;
  s.layers.resize(2);
  for (LayerSpec& l : s.layers) l.dense_intermediate = 128;
  return s;
}

TEST(TensorShard, LocalSpecHoldsTheRanksHeadsAndColumns) {
  const ModelSpec s = dense_spec();
  ASSERT_TRUE(check_tensor_parallel(s, 2).is_ok());
  const ModelSpec local = tensor_parallel_spec(s, {1, 2});
  EXPECT_EQ(local.n_heads, 2);
  EXPECT_EQ(local.n_kv_heads, 1);
  EXPECT_EQ(local.layers[1].dense_intermediate, 64);
  EXPECT_EQ(local.vocab_size, 256);                  // the LM head's logits are gathered back whole
  ASSERT_TRUE(check_tensor_parallel(s, 4).is_ok());  // 2 KV heads copied over 4 ranks
  EXPECT_EQ(tensor_parallel_spec(s, {3, 4}).n_kv_heads, 1);
}

TEST(TensorShard, SplitsThatDoNotDivideAreRefusedWithTheNumbers) {
  ModelSpec s = dense_spec();
  for (LayerSpec& l : s.layers) l.dense_intermediate = 192;  // divides by 3: the heads do not
  ModelSpec odd = s;
  for (LayerSpec& l : odd.layers) l.dense_intermediate = l.moe ? 0 : 96;  // divides by 3: the heads do not
  const Status three = check_tensor_parallel(odd, 3);
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("4 attention heads"), std::string::npos) << three.message();
  EXPECT_NE(check_tensor_parallel(dense_spec(), 3).message().find("FFN width 128"), std::string::npos);
  s = dense_spec();
  s.weights.format = WeightFormat::kInt8;
  const Status int8 = check_tensor_parallel(s, 2);
  EXPECT_EQ(int8.code(), StatusCode::kUnsupported);
  EXPECT_NE(int8.message().find("INT8 weights are not split yet"), std::string::npos) << int8.message();
  s = dense_spec();
  s.weights.format = WeightFormat::kFp8Block;  // the parts' scale grids are re-blocked
  EXPECT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
}

// MLA splits by heads (q_b / kv_b rows, o_proj columns); the latent is whole on every rank.
TEST(TensorShard, MlaSplitsByWholeHeadsAndRefusesHeadsThatDoNotDivide) {
  auto r = resolve_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v3");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelSpec& s = r->spec;
  ASSERT_EQ(s.attention, AttentionKind::kMla);
  ASSERT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
  ASSERT_TRUE(check_tensor_parallel(s, 4).is_ok()) << check_tensor_parallel(s, 4).to_string();
  const ModelSpec local = tensor_parallel_spec(s, {1, 2});
  EXPECT_EQ(local.n_heads, 2);
  EXPECT_EQ(local.mla->kv_lora_rank, s.mla->kv_lora_rank);  // the latent is not split
  ModelSpec odd = s;
  for (LayerSpec& l : odd.layers) l.dense_intermediate = l.moe ? 0 : 96;  // divides by 3: the heads do not
  const Status three = check_tensor_parallel(odd, 3);
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("4 MLA attention heads do not divide into 3 parts"), std::string::npos)
      << three.message();
  ASSERT_TRUE(check_expert_parallel(s, 2).is_ok()) << check_expert_parallel(s, 2).to_string();
}

// Shared key = value attention (DeepSeek-V4) splits its heads with their output groups; the one K=V head,
// the compressors and the indexer are whole on every rank.
TEST(TensorShard, SharedKvAttentionSplitsHeadsWithTheirOutputGroups) {
  auto r = resolve_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelSpec& s = r->spec;
  ASSERT_TRUE(s.shared_kv_low_rank && s.compressed_kv);
  ASSERT_EQ(s.n_heads, 4);
  ASSERT_EQ(s.shared_kv_low_rank->out_groups, 2);
  ASSERT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
  const ModelSpec local = tensor_parallel_spec(s, {1, 2});
  EXPECT_EQ(local.n_heads, 2);
  EXPECT_EQ(local.n_kv_heads, 1);
  EXPECT_EQ(local.shared_kv_low_rank->out_groups, 1);
  EXPECT_EQ(local.shared_kv_low_rank->out_rank, s.shared_kv_low_rank->out_rank);
  EXPECT_EQ(local.compressed_kv, s.compressed_kv);  // the indexer's heads are not split
  EXPECT_EQ(local.head_dim, s.head_dim);
  // 4 heads divide into 4 parts, their 2 output groups do not.
  const Status four = check_tensor_parallel(s, 4);
  EXPECT_EQ(four.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(four.message().find("2 output projection groups (o_groups) do not divide into 4 parts"),
            std::string::npos)
      << four.message();
}

ModelSpec moe_spec() {
  ModelSpec s = dense_spec();
  s.family = "qwen3_moe";
  s.moe = MoeSpec{.n_experts = 8, .experts_per_token = 2, .expert_intermediate = 32};
  for (LayerSpec& l : s.layers) {
    l.moe = true;
    l.dense_intermediate = 0;
  }
  return s;
}

// FP4 experts (DeepSeek-V4's release) split each expert's width on whole 32-column scale groups.
TEST(TensorShard, Fp4ExpertsSplitOnWholeScaleGroups) {
  ModelSpec s = moe_spec();
  s.weights.format = WeightFormat::kFp8Block;
  s.weights.fp4_expert_group = 32;
  s.moe->expert_intermediate = 64;
  EXPECT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
  const Status four = check_tensor_parallel(s, 4);  // 16 columns a rank: half a group
  EXPECT_EQ(four.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(four.message().find("FP4 experts of width 64 would split inside their 32-column scale groups"),
            std::string::npos)
      << four.message();
}

TEST(TensorShard, MoeLayersSplitEveryExpertsWidth) {
  ModelSpec s = moe_spec();
  ASSERT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
  EXPECT_EQ(tensor_parallel_spec(s, {1, 2}).moe->expert_intermediate, 16);
  EXPECT_EQ(tensor_parallel_spec(s, {1, 2}).moe->n_experts, 8);  // every rank holds every expert's half
  s.moe->expert_intermediate = 30;
  const Status four = check_tensor_parallel(s, 4);
  EXPECT_EQ(four.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(four.message().find("expert width 30"), std::string::npos) << four.message();
  s = moe_spec();
  s.moe->n_zero_experts = 2;  // added by one rank of the sum
  EXPECT_TRUE(check_tensor_parallel(s, 2).is_ok()) << check_tensor_parallel(s, 2).to_string();
  // Experts stacked in one tensor (gpt-oss's MXFP4, Llama 4) split expert by expert like the others.
  for (const char* stacked : {"gpt-oss", "llama4-text"}) {
    auto r = resolve_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/" + stacked);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(check_tensor_parallel(r->spec, 2).is_ok()) << check_tensor_parallel(r->spec, 2).to_string();
  }
}

TEST(ExpertPlacement, ContiguousBalancedBlocksHoldEveryExpertOnce) {
  for (int64_t n : {7, 8, 60, 256}) {
    for (int64_t ep : {1, 2, 3, 8}) {
      int64_t next = 0, largest = 0;
      for (int64_t r = 0; r < ep; ++r) {
        const dist::ExpertBlock b = dist::expert_block(n, ep, r);
        EXPECT_EQ(b.begin, next) << n << " over " << ep;
        EXPECT_TRUE(b.size() == n / ep || b.size() == (n + ep - 1) / ep) << n << " over " << ep;
        for (int64_t e = b.begin; e < b.end; ++e) EXPECT_EQ(dist::expert_owner(n, ep, e), r) << e;
        largest = std::max(largest, b.size());
        next = b.end;
      }
      EXPECT_EQ(next, n);
      EXPECT_EQ(dist::max_experts_per_rank(n, ep), largest);
    }
  }
  // Qwen2-MoE's 60 experts over 8 ranks: blocks of 7 and 8.
  EXPECT_EQ(dist::expert_block(60, 8, 0), (dist::ExpertBlock{0, 7}));
  EXPECT_EQ(dist::expert_block(60, 8, 1), (dist::ExpertBlock{7, 15}));
  EXPECT_EQ(dist::expert_block(60, 8, 7), (dist::ExpertBlock{52, 60}));
  EXPECT_EQ(dist::expert_block(8, 1, 0), (dist::ExpertBlock{0, 8}));
}

TEST(ExpertShard, WhatCannotBeSplitIsRefusedSayingWhy) {
  EXPECT_TRUE(check_expert_parallel(dense_spec(), 1).is_ok());
  EXPECT_TRUE(check_expert_parallel(moe_spec(), 2).is_ok());
  EXPECT_TRUE(check_expert_parallel(moe_spec(), 3).is_ok());  // blocks of 2, 3 and 3
  EXPECT_TRUE(check_expert_parallel(moe_spec(), 8).is_ok());
  const Status dense = check_expert_parallel(dense_spec(), 2);
  EXPECT_EQ(dense.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dense.message().find("no routed experts"), std::string::npos) << dense.message();
  const Status too_many = check_expert_parallel(moe_spec(), 16);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("8 routed experts cannot give each of 16 ranks"), std::string::npos)
      << too_many.message();
  ModelSpec zero = moe_spec();
  zero.moe->n_zero_experts = 4;  // LongCat-Flash: added once, by one rank
  EXPECT_TRUE(check_expert_parallel(zero, 2).is_ok()) << check_expert_parallel(zero, 2).to_string();
}

TEST(ExpertShard, EachRankBindsOnlyItsExpertsBytes) {
  const std::string qwen3_moe = std::string(DAY0_TEST_DATA_DIR) + "/golden/qwen3-moe";
  auto whole = load_model(qwen3_moe);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  uint64_t experts = 0;
  for (int r = 0; r < 3; ++r) {  // uneven blocks: 2, 3 and 3 of 8 experts
    LoadOptions lo;
    lo.experts = {r, 3};
    auto part = load_model(qwen3_moe, lo);
    ASSERT_TRUE(part.is_ok()) << part.status().to_string();
    const dist::ExpertBlock held = dist::expert_block(8, 3, r);
    const BoundWeightBytes& b = part->weights->bound;
    EXPECT_EQ(b.experts * 8, whole->weights->bound.experts * static_cast<uint64_t>(held.size())) << r;
    EXPECT_EQ(b.split - b.experts, whole->weights->bound.split - whole->weights->bound.experts);
    EXPECT_EQ(b.replicated, whole->weights->bound.replicated);
    const MoeWeights& moe = part->weights->layers[0].moe;
    ASSERT_EQ(moe.held_experts.size(), static_cast<size_t>(held.size()));
    for (int64_t e = held.begin; e < held.end; ++e) {
      EXPECT_EQ(moe.held_experts[static_cast<size_t>(e - held.begin)], e);
      EXPECT_EQ(moe.expert_slot[static_cast<size_t>(e)], e - held.begin);
    }
    experts += b.experts;
  }
  EXPECT_EQ(experts, whole->weights->bound.experts);  // together: every expert once
}

TEST(TensorShard, WholeLoadCountsEveryWeightByteOnce) {
  auto m = load_model(std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  // llama3 golden: BF16, V 256, H 64, 2 layers of q 64x64, k/v 32x64, o 64x64, MLP 3 x 128x64, norms;
  // untied head. Norms are bound (and counted) in their stored dtype.
  const uint64_t per_layer = 2 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64);
  const uint64_t split = 2 * (2 * 256 * 64) + 2 * per_layer;
  EXPECT_EQ(m->weights->bound.split, split);
  EXPECT_GT(m->weights->bound.replicated, 0u);
  EXPECT_EQ(m->weights->vocab.end, 256);
}

}  // namespace
}  // namespace day0
