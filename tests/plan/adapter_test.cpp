#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "day0/plan/estimate.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/plan/planner.h"
#include "day0/plan/presets.h"
#include "plan_shapes.h"

namespace day0::plan {
namespace {

const std::string kShared = DAY0_SHARED_DIR;

// The release config from ../shared/configs, costed through the manifest; skips when absent.
std::optional<ModelCost> shared_model(const std::string& rel) {
  const std::filesystem::path path = std::filesystem::path(kShared) / "configs" / rel;
  if (!std::filesystem::exists(path)) return std::nullopt;
  auto spec = load_model_config(path);
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  if (!spec) return std::nullopt;
  auto manifest = build_tensor_manifest(*spec);
  EXPECT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  if (!manifest) return std::nullopt;
  auto cost = model_cost_from_spec(*spec, *manifest, rel);
  EXPECT_TRUE(cost.is_ok()) << cost.status().to_string();
  if (!cost) return std::nullopt;
  return *cost;
}

#define SHARED_MODEL_OR_SKIP(var, rel)                                           \
  auto var##_opt = shared_model(rel);                                            \
  if (!var##_opt) {                                                              \
    GTEST_SKIP() << "shared configs not found under " << kShared << ": " << rel; \
  }                                                                              \
  const ModelCost& var = *var##_opt

ClusterSpec preset(const char* name) {
  return resolve_preset(name).value();
}

TEST(Adapter, DeepSeekV3FromItsReleaseConfig) {
  SHARED_MODEL_OR_SKIP(m, "deepseek-v3/config.json");
  EXPECT_NEAR(m.total_params() / 1e9, 671.03, 0.01);  // MTP layer 61 is not planned
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(KvPrecision::kBF16), 70272);
  EXPECT_TRUE(m.mla);
  EXPECT_EQ(m.checkpoint_precision, WeightPrecision::kFP8);
  EXPECT_EQ(m.n_experts, 256);
  // The release's FP8 stores the parameters the catalog's BF16 copy counts, scales aside.
  EXPECT_DOUBLE_EQ(m.total_params(), testing::deepseek_v3().total_params());
  // MLA down-projections are replicated across TP ranks, the rest sharded.
  EXPECT_GT(m.layers[0].param(WeightGroup::kAttentionReplicated), 0);
  EXPECT_EQ(m.layers[0].param(WeightGroup::kAttentionKv), 0);
  // Stored FP8 with f32 block scales: a little over one byte a routed-expert parameter.
  const LayerCost& last = m.layers.back();
  EXPECT_GT(last.stored(WeightGroup::kRoutedExperts), last.param(WeightGroup::kRoutedExperts));
  EXPECT_LT(last.stored(WeightGroup::kRoutedExperts), 1.001 * last.param(WeightGroup::kRoutedExperts));
}

TEST(Adapter, DeepSeekV3CheckpointFitsOneH200Node) {
  SHARED_MODEL_OR_SKIP(m, "deepseek-v3/config.json");
  const PlanResult r = plan_model(m, preset("8xH200"), Workload{}).value();  // checkpoint precision
  ASSERT_FALSE(r.feasible.empty());
  bool tp8 = false;
  for (const auto& p : r.feasible) tp8 |= p.par == Parallelism{8, 1, 1, 8};
  EXPECT_TRUE(tp8);  // SGLang's `--tp 8` recipe
  Workload bf16;
  bf16.weights = WeightPrecision::kBF16;
  EXPECT_TRUE(plan_model(m, preset("8xA100-80G"), bf16).value().feasible.empty());
}

TEST(Adapter, KimiK2FromItsReleaseConfig) {
  SHARED_MODEL_OR_SKIP(m, "kimi-k2/config.json");
  EXPECT_DOUBLE_EQ(m.total_params(), 1026408232448.0);  // Moonshot's published exact count
  Workload w;
  w.context = 131072;
  w.concurrency = 1;
  const PlanResult one = plan_model(m, preset("8xH800"), w).value();
  EXPECT_TRUE(one.feasible.empty());
  ASSERT_TRUE(one.smallest_cluster.has_value());
  EXPECT_EQ(one.smallest_cluster->total_devices(), 16);
}

TEST(Adapter, GptOssSlidingLayersBoundTheirCache) {
  SHARED_MODEL_OR_SKIP(m, "gpt-oss-120b/config.json");
  EXPECT_EQ(m.checkpoint_precision, WeightPrecision::kINT4);
  int sliding = 0;
  for (const auto& l : m.layers) sliding += l.kv_window == 128 ? 1 : 0;
  EXPECT_EQ(sliding, 18);
  // OpenAI's model card: gpt-oss-120b runs on a single 80 GB GPU (MXFP4 experts).
  Workload w;
  w.concurrency = 4;
  const PlanResult r = plan_model(m, preset("1xH100"), w).value();
  ASSERT_FALSE(r.feasible.empty());
  EXPECT_EQ(r.smallest_unit->par.devices(), 1);
  // Doubling the context grows the cache of the full-attention layers only.
  const PreparedModel short_ctx = prepare_model(m, w, preset("1xH100").device);
  w.context *= 2;
  const PreparedModel long_ctx = prepare_model(m, w, preset("1xH100").device);
  EXPECT_DOUBLE_EQ(long_ctx.kv_seq_bytes[0], short_ctx.kv_seq_bytes[0]);  // sliding layer 0
  EXPECT_DOUBLE_EQ(long_ctx.kv_seq_bytes[1], 2 * short_ctx.kv_seq_bytes[1]);
}

// MiniMax-M2's full-width q/k norm marks every layer for the TP all-reduce; a per-head norm (Llama)
// marks none.
TEST(Adapter, MinimaxM2NormOverAllHeadsIsMarkedForTensorParallelism) {
  auto m = load_model_cost("minimax-m2");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->layers.size(), 62u);
  for (const auto& l : m->layers) EXPECT_TRUE(l.heads_norm_all_reduce);
  EXPECT_DOUBLE_EQ(m->kv_bytes_per_token(KvPrecision::kBF16), 253952);  // 2 x 62 x 8 x 128 x 2 B
  auto llama = load_model_cost("llama-3.1-8b");
  ASSERT_TRUE(llama.is_ok());
  for (const auto& l : llama->layers) EXPECT_FALSE(l.heads_norm_all_reduce);
}

// LongCat-Flash: 56 MLA sublayers (two per Hugging Face layer), each caching the latent and k_pe;
// the MoE on every other one; the planner counts the published average of 8 real experts of the 12
// picks (the rest go to zero-computation experts), so its active parameters sit inside the range.
TEST(Adapter, LongcatFlashPlansForThePublishedAverageOfRealExperts) {
  auto m = load_model_cost("longcat-flash");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->layers.size(), 56u);
  for (size_t i = 0; i < m->layers.size(); ++i) EXPECT_EQ(m->layers[i].moe, i % 2 == 0) << i;
  EXPECT_DOUBLE_EQ(m->kv_bytes_per_token(KvPrecision::kBF16), 64512);  // 56 x (512 + 64) x 2 B
  EXPECT_NEAR(m->experts_per_token, 8.0, 1e-9);
  const double active = m->active_params_per_token();
  EXPECT_GT(active, 19.5e9 + 7.5 * 37748736.0 * 28);
  EXPECT_LT(active, 19.5e9 + 8.5 * 37748736.0 * 28);  // about 27.9B with the embeddings
}

TEST(Adapter, LoadModelCostResolvesCatalogNamesAndFolders) {
  auto named = load_model_cost("llama-3.1-8b");
  ASSERT_TRUE(named.is_ok()) << named.status().to_string();
  EXPECT_EQ(named->name, "llama-3.1-8b");
  EXPECT_NEAR(named->total_params() / 1e9, 8.03, 0.01);
  EXPECT_DOUBLE_EQ(named->kv_bytes_per_token(KvPrecision::kBF16), 131072);
  auto missing = load_model_cost("no-such-model");
  EXPECT_FALSE(missing.is_ok());
  const std::filesystem::path folder = std::filesystem::path(kShared) / "configs" / "llama-3.1-8b";
  if (!std::filesystem::exists(folder)) GTEST_SKIP() << "shared configs not found under " << kShared;
  auto from_folder = load_model_cost(folder.string());
  ASSERT_TRUE(from_folder.is_ok()) << from_folder.status().to_string();
  EXPECT_EQ(from_folder->name, "llama-3.1-8b");
  EXPECT_DOUBLE_EQ(from_folder->total_params(), named->total_params());
}

// DeepSeek-V4-Flash (catalog, the release's FP8 + FP4-expert bytes: 284B parameters, 156 GB) fits one
// 8xH200 node, with its 256
// routed experts spread by EP 8 among the layouts; its KV cache is the window's rows plus the compressed
// entries, which keep growing past the window.
TEST(Adapter, DeepseekV4FlashOnOneH200NodeWithExpertParallelism) {
  auto cost = load_model_cost("deepseek-v4-flash");
  ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
  const PlanResult r = plan_model(*cost, preset("8xH200"), Workload{}).value();
  ASSERT_FALSE(r.feasible.empty());
  bool ep8 = false;
  for (const auto& p : r.feasible) ep8 |= p.par.ep == 8 && p.par.devices() == 8;
  EXPECT_TRUE(ep8);
  ASSERT_TRUE(r.smallest_unit.has_value());
  EXPECT_GE(r.smallest_unit->par.devices(), 2);  // 156 GB over 141 GiB devices less the reserve
  int compressed = 0;
  for (const auto& l : cost->layers) {
    EXPECT_EQ(l.kv_window, 128);
    compressed += l.compressed_kv_bytes(KvPrecision::kBF16) > 0 ? 1 : 0;
  }
  EXPECT_EQ(compressed, 41);
  EXPECT_DOUBLE_EQ(cost->kv_bytes_per_token(KvPrecision::kBF16), 43 * 1024.0 + 21 * 320.0 + 20 * 8.0);
}

// What a decode step of Flash reads of one sequence's cache at 64K tokens, in BF16, counted by hand from
// its shapes (head 512: 1024 bytes a raw row; a compressed sparse entry 512 + an indexer key of 128,
// 1280 bytes; a heavily compressed one 1024): every layer its window of 128 raw rows; a compressed sparse
// layer its top 512 entries whole and the indexer keys of the other 65536 / 4 - 512; a heavily compressed
// layer all 65536 / 128 entries. Plus each layer's fixed state (its partial groups).
TEST(Adapter, DeepseekV4FlashDecodeReadsTheSelectedEntriesAndEveryIndexerKey) {
  auto cost = load_model_cost("deepseek-v4-flash");
  ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
  Workload w;
  w.context = 65536;
  w.kv = KvPrecision::kBF16;
  const PreparedModel p = prepare_model(*cost, w, preset("8xH200").device);
  const double window = 128 * 1024.0;
  const double sparse = window + 512 * 1280.0 + (65536 / 4 - 512) * 128 * 2.0;
  const double heavy = window + 65536 / 128 * 1024.0;
  int counted[3] = {0, 0, 0};  // window only, compressed sparse, heavily compressed
  for (size_t i = 0; i < cost->layers.size(); ++i) {
    const LayerCost& l = cost->layers[i];
    const int kind = l.reach.entry_ratio == 0 ? 0 : l.reach.selected > 0 ? 1 : 2;
    ++counted[kind];
    const double expected = (kind == 0 ? window : kind == 1 ? sparse : heavy) + l.state_bytes_per_sequence;
    EXPECT_DOUBLE_EQ(p.kv_read_bytes[i], expected) << "layer " << i << ", kind " << kind;
  }
  EXPECT_EQ(counted[0], 2);
  EXPECT_EQ(counted[1], 21);
  EXPECT_EQ(counted[2], 20);
}

// Flash's grouped output projection (o_groups 8 of its 64 heads) splits over TP only in whole groups, the
// check the engine and the distributed loader make (output_groups_split_problem). TP 16 divides the heads,
// the single K=V head's copies and every width, but not the 8 groups: on two nodes with cross-node TP it is
// listed as refused with that reason and never proposed; asked for with --tp, the plan is refused with the
// numbers. TP 8 (8 divides 8) is planned.
TEST(Adapter, DeepseekV4FlashTensorParallelismSplitsWholeOutputGroups) {
  auto cost = load_model_cost("deepseek-v4-flash");
  ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
  ASSERT_EQ(cost->out_groups, 8);
  ASSERT_EQ(cost->n_heads % 16, 0);
  Workload w;
  w.allow_cross_node_tp = true;
  const PlanResult r = plan_model(*cost, preset("2x8xH200"), w).value();
  ASSERT_FALSE(r.feasible.empty());
  for (const PlanCandidate& p : r.feasible) EXPECT_EQ(8 % p.par.tp, 0) << "TP " << p.par.tp;
  for (const PlanCandidate& p : r.over_memory) EXPECT_EQ(8 % p.par.tp, 0) << "TP " << p.par.tp;
  bool refused16 = false;
  for (const StructuralRejection& s : r.structural) {
    if (s.par.tp != 16) continue;
    refused16 = true;
    EXPECT_EQ(s.reason, "8 output projection groups (o_groups) do not divide into 16 parts");
  }
  EXPECT_TRUE(refused16);

  w.tp = 16;
  const auto sixteen = plan_model(*cost, preset("2x8xH200"), w);
  ASSERT_FALSE(sixteen.is_ok());
  EXPECT_NE(sixteen.status().message().find("--tp 16"), std::string::npos) << sixteen.status().to_string();
  EXPECT_NE(
      sixteen.status().message().find("8 output projection groups (o_groups) do not divide into 16 parts"),
      std::string::npos)
      << sixteen.status().to_string();
  w.tp = 8;
  const auto eight = plan_model(*cost, preset("2x8xH200"), w);
  ASSERT_TRUE(eight.is_ok()) << eight.status().to_string();
  ASSERT_FALSE(eight->feasible.empty());
  for (const PlanCandidate& p : eight->feasible) EXPECT_EQ(p.par.tp, 8);
}

// The release's bytes the planner charges: every layer's groups as stored, the embedding and the head.
double checkpoint_bytes(const ModelCost& m) {
  double bytes = m.embedding_checkpoint_bytes + m.lm_head_checkpoint_bytes;
  for (const LayerCost& l : m.layers) {
    for (int g = 0; g < kWeightGroups; ++g) bytes += l.stored(static_cast<WeightGroup>(g));
  }
  return bytes;
}

// DeepSeek-V4-Flash and -Pro in the bytes they ship in (Pro's entry: FP8 in 128x128 blocks, routed experts
// FP4 with a ue8m0 scale per 32; Flash's: BF16) on one 8-GPU node of H200s and of B200s: a layout that
// spreads the routed experts over the 8 devices (EP 8) is among the feasible ones, and every feasible
// layout's most loaded device holds what the planner charges it within its capacity.
TEST(Adapter, DeepseekV4FlashAndProOnOneH200AndOneB200NodeWithExpertParallelism) {
  for (const char* model : {"deepseek-v4-flash", "deepseek-v4-pro"}) {
    auto cost = load_model_cost(model);
    ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
    for (const char* cluster : {"8xH200", "8xB200"}) {
      SCOPED_TRACE(std::string(model) + " on " + cluster);
      const PlanResult r = plan_model(*cost, preset(cluster), Workload{}).value();
      ASSERT_FALSE(r.feasible.empty());
      bool ep8 = false;
      for (const PlanCandidate& p : r.feasible) {
        ep8 |= p.par.ep == 8 && p.par.devices() == 8;
        EXPECT_LE(p.memory.total, p.memory.capacity);
        EXPECT_GE(p.memory.weights() * static_cast<double>(p.par.devices()), 0.99 * checkpoint_bytes(*cost));
      }
      EXPECT_TRUE(ep8);
    }
  }
}

// Pro's checkpoint (850 GB) on one H200 (141 GiB) fits no layout: the plan says so with its numbers (what
// the most loaded device needs, what it has) and names the smallest cluster of H200s that holds it,
// instead of a layout that would run out of memory.
TEST(Adapter, DeepseekV4ProOnOneH200IsRefusedWithTheNumbers) {
  auto cost = load_model_cost("deepseek-v4-pro");
  ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
  const ClusterSpec one = preset("1xH200");
  ASSERT_LT(one.device.memory_bytes, checkpoint_bytes(*cost));
  const PlanResult r = plan_model(*cost, one, Workload{}).value();
  EXPECT_TRUE(r.feasible.empty());
  ASSERT_FALSE(r.over_memory.empty());
  const PlanCandidate& least = r.over_memory.front();
  EXPECT_GT(least.memory.total, least.memory.capacity);
  EXPECT_GE(least.memory.weights(), checkpoint_bytes(*cost));
  const std::string reason = over_memory_reason(least, Workload{});
  EXPECT_NE(reason.find("needs "), std::string::npos) << reason;
  EXPECT_NE(reason.find(", has "), std::string::npos) << reason;
  ASSERT_TRUE(r.smallest_cluster.has_value());
  EXPECT_GE(r.smallest_cluster->total_devices() * one.device.memory_bytes, checkpoint_bytes(*cost));
}

}  // namespace
}  // namespace day0::plan
