// Layer recipes: the standard pre-norm layer step by step, the families that compose their own, and the
// rules every catalog entry's recipes keep (what the engine's replay relies on).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "day0/model/catalog.h"
#include "day0/model/layer_recipe.h"
#include "model_test_support.h"

namespace day0 {
namespace {

ModelSpec catalog(const char* name) {
  return testing::catalog_spec(name);
}

TEST(LayerRecipe, StandardLayerIsPreNormMixerThenFfn) {
  const ModelSpec spec = catalog("llama-3.1-8b");
  const LayerRecipe r = layer_recipe(spec, 0);
  using enum LayerOp;
  using V = LayerValue;
  const std::vector<LayerStep> want = {
      {.op = kNorm, .in = V::kStream, .out = V::kNormed, .norm = LayerNorm::kInput},
      {.op = kMixer, .in = V::kNormed, .out = V::kOut},
      {.op = kResidualAdd, .in = V::kOut, .out = V::kStream},
      {.op = kNorm, .in = V::kStream, .out = V::kNormed, .norm = LayerNorm::kPost},
      {.op = kDenseMlp, .in = V::kNormed, .out = V::kOut},
      {.op = kResidualAdd, .in = V::kOut, .out = V::kStream},
  };
  EXPECT_EQ(r.steps, want);
  EXPECT_TRUE(r.ends_reference_layer);
  EXPECT_EQ(describe_recipe(r), "norm(input) > mixer > add > norm(post) > mlp > add");
}

TEST(LayerRecipe, MoeLayersAndDenseLayersDiffer) {
  const ModelSpec spec = catalog("deepseek-v3");  // first_k_dense_replace 3
  EXPECT_EQ(describe_recipe(layer_recipe(spec, 0)), "norm(input) > mixer > add > norm(post) > mlp > add");
  EXPECT_EQ(describe_recipe(layer_recipe(spec, 3)), "norm(input) > mixer > add > norm(post) > moe > add");
}

TEST(LayerRecipe, FamiliesComposeTheirOwn) {
  // A layer pair sharing a MoE: the first holds the MoE's output, the second adds it.
  const ModelSpec pair = catalog("longcat-flash");
  const LayerRecipe first = layer_recipe(pair, 0), second = layer_recipe(pair, 1);
  EXPECT_EQ(describe_recipe(first),
            "norm(input) > mixer > add > norm(post) > moe(normed->carry) > mlp > add");
  EXPECT_EQ(describe_recipe(second), "norm(input) > mixer > add > norm(post) > mlp > add > add(carry)");
  EXPECT_FALSE(first.ends_reference_layer);
  EXPECT_TRUE(second.ends_reference_layer);
  // One block a layer.
  const ModelSpec blocks = catalog("nemotron-3-nano-30b-a3b");
  std::set<std::string> kinds;
  for (const LayerRecipe& r : layer_recipes(blocks)) kinds.insert(describe_recipe(r));
  EXPECT_EQ(kinds, (std::set<std::string>{"norm(input) > mixer > add", "norm(input) > moe > add"}));
  // Sandwich norms, a MoE beside the dense MLP and the layer scalar (this entry has no per-layer inputs).
  const ModelSpec beside = catalog("gemma-4-26b-a4b");
  EXPECT_EQ(
      describe_recipe(layer_recipe(beside, 0)),
      "norm(input) > mixer > out_norm(attn_out) > add > norm(post) > mlp+moe > out_norm(ffn_out) > add > "
      "layer_scalar");
}

TEST(LayerRecipe, EveryCatalogEntryKeepsTheReplayRules) {
  for (const CatalogEntry& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    const ModelSpec spec = catalog(entry.name.c_str());
    const std::vector<LayerRecipe> recipes = layer_recipes(spec);
    ASSERT_EQ(static_cast<int64_t>(recipes.size()), spec.n_layers);
    bool carried = false;
    int64_t reference_layers = 0;
    for (size_t l = 0; l < recipes.size(); ++l) {
      const LayerRecipe& r = recipes[l];
      ASSERT_FALSE(r.steps.empty());
      // A value is read only after this layer (or, carried, the layer before) wrote it.
      std::set<LayerValue> written = {LayerValue::kStream};
      if (carried) written.insert(LayerValue::kCarry);
      bool reads_carry = false, writes_carry = false;
      for (const LayerStep& st : r.steps) {
        const bool reads_in = st.op != LayerOp::kPerLayerInput && st.op != LayerOp::kLayerScalar;
        if (reads_in) {
          EXPECT_TRUE(written.count(st.in)) << "layer " << l << " reads " << layer_value_name(st.in);
        }
        reads_carry = reads_carry || st.in == LayerValue::kCarry;
        writes_carry = writes_carry || st.out == LayerValue::kCarry;
        written.insert(st.out);
      }
      EXPECT_EQ(carried, reads_carry) << "layer " << l;
      carried = writes_carry;
      // The layer's blocks reach the stream: its last step writes it.
      EXPECT_EQ(r.steps.back().out, LayerValue::kStream) << "layer " << l;
      reference_layers += r.ends_reference_layer ? 1 : 0;
    }
    EXPECT_FALSE(carried) << "the last layer carries a value to no layer";
    EXPECT_GT(reference_layers, 0);
  }
}

}  // namespace
}  // namespace day0
