#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "day0/plan/planner.h"
#include "day0/plan/presets.h"
#include "plan_shapes.h"

namespace day0::plan {
namespace {

ClusterSpec preset(const char* name) {
  auto c = resolve_preset(name);
  EXPECT_TRUE(c.is_ok()) << name << ": " << c.status().to_string();
  return c.is_ok() ? *c : ClusterSpec{};
}

PlanResult plan(const ModelCost& m, const ClusterSpec& c, const Workload& w) {
  auto r = plan_model(m, c, w);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : PlanResult{};
}

const PlanCandidate* find_plan(const std::vector<PlanCandidate>& plans, Parallelism par) {
  for (const auto& p : plans) {
    if (p.par == par) return &p;
  }
  return nullptr;
}

// Costs one layout directly (feasible or not).
PlanCandidate cost(const ModelCost& m, const ClusterSpec& c, const Workload& w, Parallelism par) {
  const PreparedModel prepared = prepare_model(m, w, c.device);
  PlanCandidate out;
  out.par = par;
  out.memory = estimate_memory(prepared, c, w, par);
  out.feasible = out.memory.total <= out.memory.capacity;
  return out;
}

Workload fp8_workload() {
  Workload w;
  w.weights = WeightPrecision::kFP8;
  return w;
}

TEST(Planner, DeepSeekV3Fp8FitsOneH200Node) {
  // Public serving recipes run the FP8 release on one 8xH200 node: SGLang `--tp 8`, and DP attention 8
  // with EP 8 (SGLang `--tp 8 --dp 8 --enable-dp-attention`).
  const ModelCost m = testing::deepseek_v3();
  const PlanResult r = plan(m, preset("8xH200"), fp8_workload());
  ASSERT_FALSE(r.feasible.empty());
  EXPECT_NE(find_plan(r.feasible, {8, 1, 1, 8}), nullptr);
  EXPECT_NE(find_plan(r.feasible, {8, 1, 1, 1}), nullptr);
  EXPECT_NE(find_plan(r.feasible, {1, 1, 8, 8}), nullptr);
  ASSERT_TRUE(r.smallest_unit.has_value());
  // 680 GB of FP8 weights over 141 GiB devices less a 10% reserve: at least 5 devices, at most the node.
  EXPECT_GE(r.smallest_unit->par.devices(), 5);
  EXPECT_LE(r.smallest_unit->par.devices(), 8);
  EXPECT_FALSE(r.smallest_cluster.has_value());
  for (const auto& p : r.feasible) {
    EXPECT_LE(p.memory.total, p.memory.capacity);
    EXPECT_GT(p.time.tpot, 0);
    EXPECT_GT(p.time.ttft, p.time.tpot);
  }
}

TEST(Planner, DeepSeekV3Bf16DoesNotFitOneA100Node) {
  const ModelCost m = testing::deepseek_v3();
  Workload w;
  w.weights = WeightPrecision::kBF16;
  const PlanResult r = plan(m, preset("8xA100-80G"), w);
  EXPECT_TRUE(r.feasible.empty());
  ASSERT_FALSE(r.over_memory.empty());
  EXPECT_FALSE(r.smallest_unit.has_value());
  // 1.34 TB of BF16 weights need at least 1.34 TB / 77 GB (80 GiB less the reserve) = 18 devices: 3 nodes.
  ASSERT_TRUE(r.smallest_cluster.has_value());
  EXPECT_EQ(r.smallest_cluster->nodes, 3);
  EXPECT_EQ(r.smallest_cluster->name, "3x8xA100-80G");
  ASSERT_TRUE(r.smallest_cluster_unit.has_value());
  EXPECT_GT(r.smallest_cluster_unit->par.devices(), 16);
  EXPECT_NE(over_memory_reason(r.over_memory.front(), w).find("over by"), std::string::npos);
}

TEST(Planner, KimiK2Fp8At128kNeedsSixteenH800) {
  // vLLM's Kimi-K2 recipe: "The smallest deployment unit for Kimi-K2 FP8 weights with 128k seqlen on
  // mainstream H800 platform is a cluster with 16 GPUs" (TP, or DP + EP).
  const ModelCost m = testing::kimi_k2();
  Workload w = fp8_workload();
  w.context = 131072;
  w.concurrency = 1;
  const PlanResult one_node = plan(m, preset("8xH800"), w);
  EXPECT_TRUE(one_node.feasible.empty());
  ASSERT_TRUE(one_node.smallest_cluster.has_value());
  EXPECT_EQ(one_node.smallest_cluster->total_devices(), 16);
  EXPECT_EQ(one_node.smallest_cluster_unit->par.devices(), 16);
  const PlanResult two_nodes = plan(m, preset("2x8xH800"), w);
  ASSERT_FALSE(two_nodes.feasible.empty());
  ASSERT_TRUE(two_nodes.smallest_unit.has_value());
  EXPECT_EQ(two_nodes.smallest_unit->par.devices(), 16);
}

TEST(Planner, Llama31_8bFitsOneDeviceOfEveryPreset) {
  const ModelCost m = testing::llama31_8b();
  for (const auto& device : preset_device_names()) {
    const ClusterSpec c = preset(("1x" + device).c_str());
    const PlanResult r = plan(m, c, Workload{});
    ASSERT_FALSE(r.feasible.empty()) << device;
    ASSERT_TRUE(r.smallest_unit.has_value());
    EXPECT_EQ(r.smallest_unit->par.devices(), 1) << device;
  }
}

TEST(Planner, Llama31_70bOnOneH100NodeNeedsTensorParallelism) {
  // vLLM / TGI recipes serve Llama-3.1-70B in BF16 (141 GB) on 4 or 8 x H100 80GB with TP 4 / TP 8; 2 x
  // 80 GB cannot hold it.
  const ModelCost m = testing::llama31_70b();
  EXPECT_NEAR(m.total_params() / 1e9, 70.55, 0.01);
  Workload w;
  w.concurrency = 8;
  const PlanResult r = plan(m, preset("8xH100"), w);
  EXPECT_NE(find_plan(r.feasible, {4, 1, 1, 1}), nullptr);
  EXPECT_NE(find_plan(r.feasible, {8, 1, 1, 1}), nullptr);
  EXPECT_EQ(find_plan(r.feasible, {2, 1, 1, 1}), nullptr);
  ASSERT_TRUE(r.smallest_unit.has_value());
  EXPECT_EQ(r.smallest_unit->par.devices(), 3);  // TP 1 x PP 3: 47 GB of weights a device
}

TEST(ExpertParallelism, RoutedExpertsDivideByEpAndRedundantCopiesAddPerRank) {
  const ModelCost m = testing::deepseek_v3();
  const ClusterSpec c = preset("2x8xH100");
  Workload w = fp8_workload();
  double routed_total = 0;
  const PreparedModel prepared = prepare_model(m, w, c.device);
  for (const auto& layer : prepared.layer_bytes)
    routed_total += layer[static_cast<int>(WeightGroup::kRoutedExperts)];
  const PlanCandidate ep16 = cost(m, c, w, {1, 1, 16, 16});
  // A simulator that kept every expert on every rank asked for 21 GPUs; each rank holds 1/16 here.
  EXPECT_DOUBLE_EQ(ep16.memory.item(MemoryItem::kRoutedExperts), routed_total / 16);
  EXPECT_TRUE(ep16.feasible);
  // 32 redundant experts over 16 ranks: two more whole experts a layer on each rank (expert-TP is 1).
  w.redundant_experts = 32;
  const PlanCandidate redundant = cost(m, c, w, {1, 1, 16, 16});
  EXPECT_DOUBLE_EQ(
      redundant.memory.item(MemoryItem::kRoutedExperts) - ep16.memory.item(MemoryItem::kRoutedExperts),
      2.0 * routed_total / 256);
  // Redundant copies must still divide over the EP ranks: 256 + 32 = 288 does not divide by 64.
  const PlanResult r = plan(m, preset("8x8xH100"), w);
  for (const auto& p : r.feasible) EXPECT_EQ((256 + 32) % p.par.ep, 0);
}

TEST(DataParallelAttention, EachReplicaHoldsItsOwnKvCache) {
  const ModelCost m = testing::deepseek_v3();
  const ClusterSpec c = preset("8xH200");
  Workload w = fp8_workload();
  w.context = 8192;
  w.concurrency = 16;
  const double per_sequence = 8192.0 * 70272.0;
  // TP 8: the MLA latent is replicated on every rank, and every rank sees all 16 sequences.
  const PlanCandidate tp8 = cost(m, c, w, {8, 1, 1, 8});
  EXPECT_DOUBLE_EQ(tp8.memory.item(MemoryItem::kKvCache), 16 * per_sequence);
  // DP 8: each replica serves 2 of the 16 sequences and holds only their cache.
  const PlanCandidate dp8 = cost(m, c, w, {1, 1, 8, 8});
  EXPECT_DOUBLE_EQ(dp8.memory.item(MemoryItem::kKvCache), 2 * per_sequence);
  // ... but the whole attention block on each device.
  EXPECT_NEAR(dp8.memory.item(MemoryItem::kAttention), 8 * tp8.memory.item(MemoryItem::kAttention),
              0.9 * dp8.memory.item(MemoryItem::kAttention));
  EXPECT_GT(dp8.memory.item(MemoryItem::kAttention), tp8.memory.item(MemoryItem::kAttention));
  EXPECT_GT(dp8.memory.kv_capacity_tokens, tp8.memory.kv_capacity_tokens);
}

TEST(GqaKvCache, KvHeadsShardUntilTpExceedsThem) {
  const ModelCost m = testing::llama31_8b();
  ClusterSpec c = preset("2x8xH100");
  Workload w;
  w.allow_cross_node_tp = true;
  const double tp1 = cost(m, c, w, {1, 1, 1, 1}).memory.item(MemoryItem::kKvCache);
  EXPECT_DOUBLE_EQ(tp1, 16 * 8192.0 * 131072.0);
  EXPECT_DOUBLE_EQ(cost(m, c, w, {2, 1, 1, 1}).memory.item(MemoryItem::kKvCache), tp1 / 2);
  EXPECT_DOUBLE_EQ(cost(m, c, w, {8, 1, 1, 1}).memory.item(MemoryItem::kKvCache), tp1 / 8);
  // 8 kv heads over 16 ranks: each rank keeps one whole kv head.
  EXPECT_DOUBLE_EQ(cost(m, c, w, {16, 1, 1, 1}).memory.item(MemoryItem::kKvCache), tp1 / 8);
}

TEST(Divisibility, DegreesDivideHeadsExpertsAndNodes) {
  nlohmann::json config = testing::bf16_config("llama-3.1-8b");
  config["num_attention_heads"] = 12;  // a hypothetical model: 12 heads of 128, 4 kv heads
  config["num_key_value_heads"] = 4;
  config["hidden_size"] = 1536;
  const ModelCost m = testing::cost_of(config, "12-heads");
  const PlanResult r = plan(m, preset("2x8xH100"), Workload{});
  ASSERT_FALSE(r.feasible.empty());
  for (const auto& p : r.feasible) {
    EXPECT_EQ(12 % p.par.tp, 0);
    EXPECT_LE(p.par.tp, 8);  // TP stays inside a node by default
    EXPECT_EQ(p.par.dp, 1);  // dense model: no attention replicas
    EXPECT_EQ(p.par.ep, 1);
  }
  bool saw_heads = false, saw_node = false;
  for (const auto& rej : r.structural) {
    saw_heads |= rej.reason.find("12 attention heads do not divide by TP 8") != std::string::npos;
    saw_node |= rej.reason.find("spans nodes") != std::string::npos;
  }
  EXPECT_TRUE(saw_heads);
  EXPECT_TRUE(saw_node);
  EXPECT_GT(r.n_structural, 0);
  const ModelCost ds = testing::deepseek_v3();
  const PlanResult moe = plan(ds, preset("2x8xH200"), fp8_workload());
  for (const auto& p : moe.feasible) {
    EXPECT_EQ(256 % p.par.ep, 0);
    EXPECT_EQ(p.par.stage_devices() % p.par.ep, 0);
    EXPECT_EQ(2048 % p.par.expert_tp(), 0);
  }
}

TEST(Monotonic, MoreDevicesNeverMakeAFeasiblePlanInfeasible) {
  const ModelCost m = testing::deepseek_v3();
  Workload w;
  w.weights = WeightPrecision::kBF16;
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> previous;
  bool fitted = false;
  for (int64_t nodes = 1; nodes <= 6; ++nodes) {
    const PlanResult r = plan(m, with_nodes(preset("8xH100"), nodes), w);
    std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> now;
    for (const auto& p : r.feasible) now.insert({p.par.tp, p.par.pp, p.par.dp, p.par.ep});
    for (const auto& p : previous) EXPECT_TRUE(now.count(p)) << nodes << " nodes lost a layout";
    if (fitted) {
      EXPECT_FALSE(r.feasible.empty()) << nodes;
    }
    fitted |= !r.feasible.empty();
    previous = now;
  }
  EXPECT_TRUE(fitted);
  // Spreading one layout wider (more EP / DP ranks) never needs more memory a device.
  const ClusterSpec c = preset("8x8xH100");
  double last = 1e300;
  for (int64_t dp : {1, 2, 4, 8, 16, 32, 64}) {
    const double total = cost(m, c, w, {1, 1, dp, dp}).memory.total;
    EXPECT_LE(total, last) << dp;
    last = total;
  }
}

TEST(Monotonic, LongerContextNeverLowersMemory) {
  const ModelCost m = testing::deepseek_v3();
  const ClusterSpec c = preset("2x8xH200");
  Workload w = fp8_workload();
  const Parallelism layouts[] = {{8, 1, 1, 8}, {1, 1, 16, 16}, {8, 2, 1, 8}, {2, 1, 4, 8}};
  for (const auto& par : layouts) {
    double last = 0;
    for (int64_t context : {512, 4096, 8192, 32768, 131072}) {
      w.context = context;
      const double total = cost(m, c, w, par).memory.total;
      EXPECT_GE(total, last) << context;
      last = total;
    }
  }
}

TEST(Monotonic, Fp8WeightsNeverNeedMoreThanBf16) {
  for (const ModelCost& m : {testing::deepseek_v3(), testing::llama31_8b(), testing::kimi_k2()}) {
    const ClusterSpec c = preset("4x8xH100");
    Workload bf16;
    bf16.weights = WeightPrecision::kBF16;
    Workload fp8 = bf16;
    fp8.weights = WeightPrecision::kFP8;
    const PlanResult r = plan(m, c, bf16);
    for (const auto& p : r.feasible) {
      const PlanCandidate q = cost(m, c, fp8, p.par);
      EXPECT_LE(q.memory.total, p.memory.total);
      EXPECT_TRUE(q.feasible);
    }
    EXPECT_GE(plan(m, c, fp8).feasible.size(), r.feasible.size());
  }
}

TEST(Objectives, RankByTheirCriterion) {
  const ModelCost m = testing::deepseek_v3();
  const ClusterSpec c = preset("4x8xH200");
  Workload w = fp8_workload();
  for (Objective o :
       {Objective::kMinLatency, Objective::kMaxThroughputPerDevice, Objective::kFewestDevices}) {
    w.objective = o;
    const PlanResult r = plan(m, c, w);
    ASSERT_GT(r.feasible.size(), 2u);
    const PlanCandidate& best = r.feasible.front();
    for (const auto& p : r.feasible) {
      if (o == Objective::kMinLatency) {
        EXPECT_LE(best.time.tpot, p.time.tpot);
      }
      if (o == Objective::kMaxThroughputPerDevice) {
        EXPECT_GE(best.time.tokens_per_s_per_device, p.time.tokens_per_s_per_device);
      }
      if (o == Objective::kFewestDevices) {
        EXPECT_LE(best.par.devices(), p.par.devices());
      }
    }
  }
}

TEST(TimeModel, DecodeIsBoundedByReadingTheWeights) {
  const ModelCost m = testing::llama31_8b();
  const ClusterSpec c = preset("8xH100");
  Workload w;
  w.concurrency = 1;
  const PlanResult r = plan(m, c, w);
  const PlanCandidate* tp1 = find_plan(r.feasible, {1, 1, 1, 1});
  const PlanCandidate* tp2 = find_plan(r.feasible, {2, 1, 1, 1});
  ASSERT_TRUE(tp1 && tp2);
  // One token must at least stream every weight once: 16.06 GB / 3.35 TB/s = 4.8 ms.
  EXPECT_GE(tp1->time.tpot, m.total_params() * 2 / 3.35e12 * 0.999);
  EXPECT_LE(tp1->time.tpot, m.total_params() * 2 / 3.35e12 * 1.2);
  EXPECT_TRUE(tp1->time.decode_memory_bound);
  EXPECT_LT(tp2->time.tpot, tp1->time.tpot);  // half the weights a device, plus a cheap NVLink all-reduce
  EXPECT_GT(tp2->time.comm_share, 0);
  EXPECT_EQ(tp1->time.comm_share, 0);
  // Prefill of 8192 tokens is compute-bound: at least 2 x params x tokens / peak.
  EXPECT_GE(tp1->time.ttft, 2 * m.total_params() * 8192 / c.device.peak_flops_bf16);
}

// MiniMax-M2's q/k norm spans all heads: under TP every layer adds a small all-reduce of the sums of
// squares, which costs nothing on one device.
TEST(TimeModel, NormOverAllHeadsAddsAnAllReduceUnderTensorParallelism) {
  ModelCost with = testing::llama31_8b();
  ModelCost without = with;
  for (auto& layer : with.layers) layer.heads_norm_all_reduce = true;
  const ClusterSpec c = preset("8xH100");
  Workload w;
  w.concurrency = 1;
  const PlanResult a = plan(with, c, w), b = plan(without, c, w);
  const PlanCandidate* a1 = find_plan(a.feasible, {1, 1, 1, 1});
  const PlanCandidate* b1 = find_plan(b.feasible, {1, 1, 1, 1});
  const PlanCandidate* a2 = find_plan(a.feasible, {2, 1, 1, 1});
  const PlanCandidate* b2 = find_plan(b.feasible, {2, 1, 1, 1});
  ASSERT_TRUE(a1 && b1 && a2 && b2);
  EXPECT_DOUBLE_EQ(a1->time.tpot, b1->time.tpot);
  EXPECT_GT(a2->time.tpot, b2->time.tpot);
  EXPECT_GT(a2->time.comm_share, b2->time.comm_share);
}

TEST(Planner, BadInputIsAnErrorNotACrash) {
  const ModelCost m = testing::llama31_8b();
  Workload w;
  w.concurrency = 0;
  EXPECT_EQ(plan_model(m, preset("8xH100"), w).status().code(), StatusCode::kInvalidArgument);
  w = Workload{};
  w.reserve_fraction = 0.95;
  EXPECT_FALSE(plan_model(m, preset("8xH100"), w).is_ok());
  ModelCost empty;
  EXPECT_FALSE(plan_model(empty, preset("8xH100"), Workload{}).is_ok());
  ClusterSpec broken = preset("8xH100");
  broken.device.memory_bandwidth = -1;
  EXPECT_FALSE(plan_model(m, broken, Workload{}).is_ok());
  EXPECT_FALSE(parse_objective("fastest").is_ok());
  EXPECT_FALSE(parse_weight_precision("fp6").is_ok());
}

TEST(Planner, ModelTooLargeForAnySearchedClusterSaysSo) {
  const ModelCost m = testing::three_trillion();
  Workload w;
  w.weights = WeightPrecision::kBF16;
  PlanOptions options;
  options.max_grow_nodes = 4;  // 32 x 80 GiB cannot hold 6 TB
  auto r = plan_model(m, preset("1xH100"), w, options);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->feasible.empty());
  EXPECT_FALSE(r->smallest_cluster.has_value());
}

}  // namespace
}  // namespace day0::plan
