// Redundant experts (EPLB): where the copies go, which copy computes each pick, and the recorded
// expert-load file that places them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "day0/dist/expert_load.h"
#include "day0/dist/expert_placement.h"

namespace day0::dist {
namespace {

// Every physical expert accounted for: blocks first, no rank holding one expert twice, holders and
// held the same relation seen from both sides.
void expect_consistent(const LayerExpertPlacement& p, int64_t n_experts, int64_t ep, int64_t redundant) {
  ASSERT_EQ(p.ep(), ep);
  ASSERT_EQ(p.n_experts(), n_experts);
  int64_t slots = 0;
  for (int64_t r = 0; r < ep; ++r) {
    const std::vector<int32_t>& held = p.held[static_cast<size_t>(r)];
    const ExpertBlock block = expert_block(n_experts, ep, r);
    ASSERT_GE(static_cast<int64_t>(held.size()), block.size()) << "rank " << r;
    for (int64_t i = 0; i < block.size(); ++i) EXPECT_EQ(held[static_cast<size_t>(i)], block.begin + i);
    std::vector<int32_t> sorted = held;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "rank " << r << " twice";
    for (int32_t e : held) {
      const std::vector<int32_t>& h = p.holders[static_cast<size_t>(e)];
      EXPECT_NE(std::find(h.begin(), h.end(), r), h.end()) << "expert " << e << " rank " << r;
    }
    slots += static_cast<int64_t>(held.size());
  }
  EXPECT_EQ(slots, n_experts + redundant);
  for (int64_t e = 0; e < n_experts; ++e) {
    const std::vector<int32_t>& h = p.holders[static_cast<size_t>(e)];
    ASSERT_FALSE(h.empty()) << e;
    EXPECT_EQ(h.front(), expert_owner(n_experts, ep, e)) << "the block's rank first";
  }
}

TEST(RedundantExperts, CopiesGoToTheRanksWithTheFewestSlots) {
  // 60 experts over 8 ranks: blocks of 7 (even ranks) and 8 (odd ranks); four copies fill the 7s.
  EXPECT_EQ(replicas_per_rank(60, 8, 4), (std::vector<int64_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(max_slots_per_rank(60, 8, 4), 8);
  EXPECT_EQ(max_slots_per_rank(60, 8, 5), 9);
  EXPECT_EQ(max_slots_per_rank(60, 8, 0), max_experts_per_rank(60, 8));
  // 256 experts + 32 copies over 32 ranks (DeepSeek-V3's deployment): 9 slots each.
  EXPECT_EQ(max_slots_per_rank(256, 32, 32), 9);
  const std::vector<int64_t> r = replicas_per_rank(256, 32, 32);
  EXPECT_EQ(std::accumulate(r.begin(), r.end(), int64_t{0}), 32);
}

// The closed form equals placing copies one at a time on the first rank with the fewest slots.
TEST(RedundantExperts, ClosedFormEqualsCopyByCopyFilling) {
  for (int64_t n : {1, 7, 8, 60, 256, 384}) {
    for (int64_t ep : {1, 2, 3, 5, 8, 32, 64}) {
      for (int64_t redundant : {0, 1, 3, 4, 5, 31, 32, 33, 100, 1000}) {
        std::vector<int64_t> slots(static_cast<size_t>(ep)), want(static_cast<size_t>(ep), 0);
        for (int64_t r = 0; r < ep; ++r) slots[static_cast<size_t>(r)] = expert_block(n, ep, r).size();
        for (int64_t i = 0; i < redundant; ++i) {
          const auto r = static_cast<size_t>(std::min_element(slots.begin(), slots.end()) - slots.begin());
          ++slots[r];
          ++want[r];
        }
        EXPECT_EQ(replicas_per_rank(n, ep, redundant), want)
            << n << " experts, EP " << ep << ", " << redundant;
      }
    }
  }
  // The largest count the CLI accepts (2^16) costs no more than a small one.
  const std::vector<int64_t> big = replicas_per_rank(256, 8, int64_t{1} << 16);
  EXPECT_EQ(std::accumulate(big.begin(), big.end(), int64_t{0}), int64_t{1} << 16);
}

TEST(RedundantExperts, ImpossibleCountsAreRefusedWithTheNumbers) {
  EXPECT_TRUE(check_redundant_experts(8, 2, 0).is_ok());
  EXPECT_TRUE(check_redundant_experts(8, 2, 8).is_ok());  // every expert on both ranks
  const Status too_many = check_redundant_experts(8, 2, 9);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("at most 8"), std::string::npos) << too_many.to_string();
  EXPECT_EQ(check_redundant_experts(8, 2, -1).code(), StatusCode::kInvalidArgument);
  const Status no_ep = check_redundant_experts(8, 1, 2);
  EXPECT_NE(no_ep.message().find("--ep 2"), std::string::npos) << no_ep.to_string();
}

TEST(RedundantExperts, WithoutALoadEveryCopyIsADifferentExpertAndRanksStayEven) {
  for (int64_t ep : {2, 3, 4}) {
    for (int64_t redundant : {0, 1, 3, 8}) {
      const LayerExpertPlacement p = place_layer_experts(8, ep, redundant);
      expect_consistent(p, 8, ep, redundant);
      EXPECT_EQ(p.replicated(), redundant > 0);
      int64_t most = 0, least = 1 << 20;
      for (const auto& held : p.held) {
        most = std::max<int64_t>(most, static_cast<int64_t>(held.size()));
        least = std::min<int64_t>(least, static_cast<int64_t>(held.size()));
      }
      EXPECT_EQ(most, max_slots_per_rank(8, ep, redundant));  // never past what memory was sized for
      if (ep == 2) {  // equal weights: no expert gets a second copy before all have one
        EXPECT_LE(most - least, 1) << "redundant " << redundant;
        for (const auto& h : p.holders) EXPECT_LE(h.size(), 2u);
      }
    }
  }
}

TEST(RedundantExperts, TheHottestExpertsGetTheCopiesOnTheLeastLoadedRank) {
  // Experts 0 and 1 (rank 0's block) take most picks. Two copies over two ranks size every rank to 5
  // slots: rank 1 takes expert 0's copy; expert 1's would need a second slot there, so rank 0 takes the
  // busiest expert it lacks.
  const std::vector<double> load = {100, 60, 1, 1, 1, 1, 1, 1};
  const LayerExpertPlacement p = place_layer_experts(8, 2, 2, load);
  expect_consistent(p, 8, 2, 2);
  EXPECT_EQ(p.holders[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.held[1], (std::vector<int32_t>{4, 5, 6, 7, 0}));
  EXPECT_EQ(p.held[0], (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // Three copies over four ranks of two: every rank may grow to three slots, so the hot expert goes to
  // every other rank once.
  const std::vector<double> one_hot = {1000, 1, 1, 1, 1, 1, 1, 1};
  const LayerExpertPlacement q = place_layer_experts(8, 4, 3, one_hot);
  expect_consistent(q, 8, 4, 3);
  EXPECT_EQ(q.holders[0], (std::vector<int32_t>{0, 1, 2, 3}));
  // The same inputs give the same placement on every rank.
  const LayerExpertPlacement again = place_layer_experts(8, 4, 3, one_hot);
  EXPECT_EQ(again.held, q.held);
}

TEST(RedundantExperts, PicksOfACopiedExpertAreSharedInTurnAndRotateWithTheStep) {
  const std::vector<double> load = {100, 1, 1, 1};
  const LayerExpertPlacement p = place_layer_experts(4, 2, 1, load);  // expert 0 on ranks 0 and 1
  ASSERT_EQ(p.holders[0], (std::vector<int32_t>{0, 1}));
  // [T 3, k 2]: expert 0 picked three times, expert 3 (rank 1 only) once, a zero expert (id 4) once.
  const std::vector<int32_t> ids = {0, 3, 0, 1, 0, 4};
  std::vector<int32_t> ranks(ids.size());
  dispatch_picks(p, ids, 0, ranks);
  EXPECT_EQ(ranks, (std::vector<int32_t>{0, 1, 1, 0, 0, -1}));
  dispatch_picks(p, ids, 1, ranks);  // the next position starts at the other copy
  EXPECT_EQ(ranks, (std::vector<int32_t>{1, 1, 0, 0, 1, -1}));
  // One-token decode steps alternate between the copies.
  std::vector<int64_t> on(2, 0);
  for (int64_t position = 10; position < 20; ++position) {
    std::vector<int32_t> one(1);
    dispatch_picks(p, std::vector<int32_t>{0}, position, one);
    ++on[static_cast<size_t>(one[0])];
  }
  EXPECT_EQ(on, (std::vector<int64_t>{5, 5}));
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("day0_expert_load_" + name)).string();
}

TEST(ExpertLoadFile, RoundTripsAndPlacesByTheRecordedCounts) {
  ExpertLoad load{.n_experts = 4};
  load.layers[1] = {9, 0, 3, 1};
  load.layers[2] = {1, 1, 1, 1};
  const std::string path = temp_path("round_trip.json");
  ASSERT_TRUE(write_expert_load(path, load, "miniature").is_ok());
  auto back = read_expert_load(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->n_experts, 4);
  EXPECT_EQ(back->layers, load.layers);
  const std::vector<int64_t> moe_layers = {1, 2};
  EXPECT_TRUE(check_expert_load(*back, path, 4, moe_layers).is_ok());
  auto placed = place_model_experts(4, 2, 1, 3, moe_layers, &*back);
  ASSERT_EQ(placed->layers.size(), 3u);
  EXPECT_TRUE(placed->layers[0].held.empty());                            // a dense layer
  EXPECT_EQ(placed->layers[1].holders[0], (std::vector<int32_t>{0, 1}));  // the hot expert of layer 1
  std::filesystem::remove(path);
}

TEST(ExpertLoadFile, BadFilesNameTheKeyWhatWasExpectedAndWhatWasFound) {
  struct Case {
    std::string text, key, found;
  };
  const std::vector<Case> cases = {
      {"[1, 2]", "(top level)", "an object"},
      {R"({"format": "other", "version": 1, "n_experts": 2, "layers": []})", "format", "\"other\""},
      {R"({"format": "day0-expert-load", "version": 2, "n_experts": 2, "layers": []})", "version", "2"},
      {R"({"format": "day0-expert-load", "version": 1, "n_experts": 0, "layers": []})", "n_experts", "0"},
      {R"({"format": "day0-expert-load", "version": 1, "n_experts": 2, "layers": {}})", "layers", "{}"},
      {R"({"format": "day0-expert-load", "version": 1, "n_experts": 2, "layers": [{"layer": 0, "picks": [1]}]})",
       "layers[0].picks", "1"},
      {R"({"format": "day0-expert-load", "version": 1, "n_experts": 2, "layers": [{"layer": 0, "picks": [1, -3]}]})",
       "layers[0].picks[1]", "-3"},
      {R"({"format": "day0-expert-load", "version": 1, "n_experts": 2,
           "layers": [{"layer": 0, "picks": [1, 2]}, {"layer": 0, "picks": [1, 2]}]})",
       "layers[1].layer", "0 again"},
      {"{\"format\": ", "", ""},  // not JSON
  };
  for (const Case& c : cases) {
    auto r = parse_expert_load(c.text, "load.json");
    ASSERT_FALSE(r.is_ok()) << c.text;
    const std::string m = r.status().to_string();
    EXPECT_NE(m.find("load.json"), std::string::npos) << m;
    EXPECT_NE(m.find(c.key), std::string::npos) << m;
    EXPECT_NE(m.find(c.found), std::string::npos) << m;
  }
  // A well-formed file for another model: the expert count, a missing and an extra layer.
  ExpertLoad load{.n_experts = 4};
  load.layers[1] = {1, 2, 3, 4};
  const std::vector<int64_t> layers_1_2 = {1, 2}, layers_1 = {1};
  const Status experts = check_expert_load(load, "l.json", 8, layers_1);
  EXPECT_NE(experts.message().find("8 (the model's routed experts)"), std::string::npos)
      << experts.to_string();
  const Status missing = check_expert_load(load, "l.json", 4, layers_1_2);
  EXPECT_NE(missing.message().find("MoE layer 2"), std::string::npos) << missing.to_string();
  load.layers[5] = {1, 1, 1, 1};
  const Status extra = check_expert_load(load, "l.json", 4, layers_1);
  EXPECT_NE(extra.message().find("layer 5"), std::string::npos) << extra.to_string();
  // A folder is not a load file.
  EXPECT_FALSE(read_expert_load(std::filesystem::temp_directory_path().string()).is_ok());
}

}  // namespace
}  // namespace day0::dist
