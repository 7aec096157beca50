#include <gtest/gtest.h>

#include <cmath>

#include "day0/plan/estimate.h"
#include "day0/plan/model_cost.h"
#include "plan_shapes.h"

namespace day0::plan {
namespace {

TEST(WeightTable, ThreeTrillionParameters) {
  // The public weight table of a 3T-parameter model: FP32 12 TB, BF16 6 TB, INT8 3 TB, INT4 1.5 TB.
  const auto table = weight_table(3e12);
  auto bytes_of = [&](std::string_view dtype) {
    for (const auto& row : table) {
      if (dtype == row.dtype) return row.bytes;
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(bytes_of("FP32"), 12e12);
  EXPECT_DOUBLE_EQ(bytes_of("BF16"), 6e12);
  EXPECT_DOUBLE_EQ(bytes_of("INT8"), 3e12);
  EXPECT_DOUBLE_EQ(bytes_of("INT4"), 1.5e12);
}

TEST(ModelCost, DeepSeekV3CountsMatchThePublishedTotal) {
  const ModelCost m = testing::deepseek_v3();
  // DeepSeek: 671B total, 37B active (the weight table's count of the config: 671.03B / 37.55B; the
  // multi-token-prediction layer is not planned).
  EXPECT_NEAR(m.total_params() / 1e9, 671.03, 0.01);
  EXPECT_NEAR(m.active_params_per_token() / 1e9, 37.55, 0.01);
  EXPECT_EQ(m.n_layers(), 61);
}

TEST(ModelCost, DeepSeekV3MlaKvBytesPerToken) {
  const ModelCost m = testing::deepseek_v3();
  // (kv_lora_rank 512 + rope 64) x 61 layers x 2 bytes.
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(KvPrecision::kBF16), 70272);
  EXPECT_DOUBLE_EQ(m.kv_bytes_per_token(KvPrecision::kFp8E4M3), 35136);
}

TEST(ModelCost, LlamaKimiAndThreeTrillionTotals) {
  const ModelCost llama = testing::llama31_8b();
  EXPECT_NEAR(llama.total_params() / 1e9, 8.03, 0.01);  // Meta: 8.03B
  // GQA: 2 (k, v) x 8 kv heads x 128 x 32 layers x 2 bytes.
  EXPECT_DOUBLE_EQ(llama.kv_bytes_per_token(KvPrecision::kBF16), 131072);
  const ModelCost kimi = testing::kimi_k2();
  EXPECT_DOUBLE_EQ(kimi.total_params(), 1026408232448.0);  // Moonshot's published exact count
  const ModelCost big = testing::three_trillion();
  EXPECT_NEAR(big.total_params() / 1e12, 3.0, 0.05);
}

TEST(GroupBytes, PrecisionsOrderAndCarryScales) {
  const ModelCost m = testing::deepseek_v3();
  const LayerCost& layer = m.layers.back();
  const double params = layer.param(WeightGroup::kRoutedExperts);
  const double bf16 = group_bytes(layer, WeightGroup::kRoutedExperts, WeightPrecision::kBF16);
  const double fp8 = group_bytes(layer, WeightGroup::kRoutedExperts, WeightPrecision::kFP8);
  const double int8 = group_bytes(layer, WeightGroup::kRoutedExperts, WeightPrecision::kINT8);
  const double int4 = group_bytes(layer, WeightGroup::kRoutedExperts, WeightPrecision::kINT4);
  EXPECT_DOUBLE_EQ(bf16, 2 * params);
  EXPECT_GT(fp8, params);  // one f32 scale per 128x128 block
  EXPECT_LT(fp8, 1.001 * params);
  EXPECT_LE(int8, fp8);
  EXPECT_GT(int4, params / 2);
  EXPECT_LT(int4, int8);
  // Norms and routers stay 16-bit whatever --weights says.
  EXPECT_DOUBLE_EQ(group_bytes(layer, WeightGroup::kRouter, WeightPrecision::kINT4),
                   2 * layer.param(WeightGroup::kRouter));
  EXPECT_DOUBLE_EQ(group_bytes(layer, WeightGroup::kRoutedExperts, WeightPrecision::kCheckpoint),
                   layer.stored(WeightGroup::kRoutedExperts));
}

TEST(StageLayers, PartitionCoversEveryLayerOnce) {
  for (int64_t layers : {1, 32, 61, 66}) {
    for (int64_t pp = 1; pp <= layers; ++pp) {
      int64_t next = 0;
      int64_t smallest = layers, largest = 0;
      for (int64_t s = 0; s < pp; ++s) {
        const auto [first, last] = stage_layers(layers, pp, s);
        ASSERT_EQ(first, next) << layers << " " << pp << " " << s;
        ASSERT_GT(last, first);
        smallest = std::min(smallest, last - first);
        largest = std::max(largest, last - first);
        next = last;
      }
      EXPECT_EQ(next, layers);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

}  // namespace
}  // namespace day0::plan
