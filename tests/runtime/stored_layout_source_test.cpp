// Stored layouts (model/stored_layout.h): a release's own tensor names for a weight table, renamed and
// fused tensors split by rows. The manifest under the layout's names, and the engine's view of such a
// checkpoint under the table's names, without copies.
#include <gtest/gtest.h>

#include <cstring>

#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {
namespace {

// A Sarvam-style config (fused query_key_value) with q/k/v biases, so that 1-D parts split too.
ModelSpec sarvam_with_biases() {
  const nlohmann::json config = {{"architectures", {"SarvamMoEForCausalLM"}},
                                 {"model_type", "sarvam_moe"},
                                 {"vocab_size", 64},
                                 {"hidden_size", 32},
                                 {"intermediate_size", 48},
                                 {"moe_intermediate_size", 16},
                                 {"num_hidden_layers", 2},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2},
                                 {"head_dim", 8},
                                 {"num_experts", 4},
                                 {"num_experts_per_tok", 2},
                                 {"use_qkv_bias", true}};
  auto spec = parse_model_config(config, "sarvam");
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  return *spec;
}

TEST(StoredLayout, FusedPartsBecomeOneTensorOfTheirRowsStacked) {
  const ModelSpec spec = sarvam_with_biases();
  auto manifest = build_tensor_manifest(spec);
  ASSERT_TRUE(manifest.is_ok());
  const StoredLayout* layout = release_layout(*manifest);
  ASSERT_NE(layout, nullptr);
  const TensorManifest stored = to_stored_layout(*manifest, *layout);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : stored.tensors) by_name[t.name] = &t;
  // q 4 x 8 rows, k and v 2 x 8 each: 64 rows of 32, and the biases likewise.
  ASSERT_TRUE(by_name.count("model.layers.1.attention.query_key_value.weight"));
  EXPECT_EQ(by_name["model.layers.1.attention.query_key_value.weight"]->shape,
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(by_name["model.layers.1.attention.query_key_value.weight"]->params, 64 * 32);
  EXPECT_EQ(by_name["model.layers.1.attention.query_key_value.bias"]->shape, (std::vector<int64_t>{64}));
  EXPECT_TRUE(by_name.count("model.word_embeddings.weight"));
  EXPECT_TRUE(by_name.count("model.layers.0.attention.dense.weight"));
  EXPECT_TRUE(by_name.count("model.layers.1.attention.query_layernorm.weight"));
  EXPECT_TRUE(by_name.count("model.layers.1.mlp.gate.expert_bias"));
  EXPECT_FALSE(by_name.count("model.layers.1.self_attn.q_proj.weight"));
  // Parameters are the same either way.
  int64_t table = 0, release = 0;
  for (const auto& t : manifest->tensors) table += t.params;
  for (const auto& t : stored.tensors) release += t.params;
  EXPECT_EQ(table, release);
  // The layout in use is found from the names a checkpoint holds.
  EXPECT_EQ(stored_layout_in_use(*manifest, [&](const std::string& n) { return by_name.count(n) != 0; }),
            layout);
  EXPECT_EQ(stored_layout_in_use(*manifest, [](const std::string&) { return true; }), nullptr);
}

TEST(StoredLayout, SourceReadsTheTableNamesAsViewsOfTheStoredRows) {
  const ModelSpec spec = sarvam_with_biases();
  auto manifest = build_tensor_manifest(spec);
  ASSERT_TRUE(manifest.is_ok());
  const StoredLayout& layout = *release_layout(*manifest);
  auto memory = std::make_shared<MemoryTensorSource>();
  // Row r of the fused weight holds the value r in every column, the bias r + 0.5.
  std::vector<float> qkv(64 * 32), bias(64);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 32; ++c) qkv[static_cast<size_t>(r * 32 + c)] = static_cast<float>(r);
    bias[static_cast<size_t>(r)] = static_cast<float>(r) + 0.5f;
  }
  const auto bytes_of = [](const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(float));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  memory->put("model.layers.0.attention.query_key_value.weight", DType::kF32, {64, 32}, bytes_of(qkv));
  memory->put("model.layers.0.attention.query_key_value.bias", DType::kF32, {64}, bytes_of(bias));
  memory->put("model.layers.0.attention.dense.weight", DType::kF32, {32, 32},
              bytes_of(std::vector<float>(1024)));
  auto view = stored_layout_source(memory, *manifest, layout);
  struct Part {
    const char* name;
    int64_t rows, first;
  };
  for (const Part& p : {Part{"q_proj", 32, 0}, Part{"k_proj", 16, 32}, Part{"v_proj", 16, 48}}) {
    SCOPED_TRACE(p.name);
    const std::string stem = std::string("model.layers.0.self_attn.") + p.name;
    ASSERT_TRUE(view->contains(stem + ".weight"));
    auto w = view->get(stem + ".weight");
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->shape, (std::vector<int64_t>{p.rows, 32}));
    const auto* values = reinterpret_cast<const float*>(w->data.data());
    EXPECT_EQ(values[0], static_cast<float>(p.first));
    EXPECT_EQ(values[p.rows * 32 - 1], static_cast<float>(p.first + p.rows - 1));
    auto b = view->get(stem + ".bias");
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(b->shape, (std::vector<int64_t>{p.rows}));
    EXPECT_EQ(reinterpret_cast<const float*>(b->data.data())[0], static_cast<float>(p.first) + 0.5f);
  }
  EXPECT_TRUE(view->contains("model.layers.0.self_attn.o_proj.weight"));   // renamed: attention.dense
  EXPECT_FALSE(view->contains("model.layers.1.self_attn.q_proj.weight"));  // not stored here
}

}  // namespace
}  // namespace day0
