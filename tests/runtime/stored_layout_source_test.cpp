// Stored layouts (model/stored_layout.h): a release's own tensor names for a weight table, renamed and
// fused tensors split by rows. The manifest under the layout's names, and the engine's view of such a
// checkpoint under the table's names, without copies.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

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

// Qwen3.5-MoE's wrapper: the BF16 releases stack each layer's experts ([E, 2I, H] gate then up rows per
// expert, [E, H, I]) under model.language_model.; transformers' save keeps one tensor per expert. The
// stacked layout is chosen only when the checkpoint holds the stacked tensors, and an expert's gate, up
// and down are views of its rows.
TEST(StoredLayout, StackedExpertsAreRowsOfOneTensorPerLayer) {
  nlohmann::json text = {{"model_type", "qwen3_5_moe_text"},
                         {"vocab_size", 64},
                         {"hidden_size", 16},
                         {"num_hidden_layers", 4},
                         {"num_attention_heads", 2},
                         {"num_key_value_heads", 1},
                         {"head_dim", 8},
                         {"linear_key_head_dim", 8},
                         {"linear_value_head_dim", 8},
                         {"linear_num_key_heads", 1},
                         {"linear_num_value_heads", 2},
                         {"num_experts", 4},
                         {"num_experts_per_tok", 2},
                         {"moe_intermediate_size", 4},
                         {"shared_expert_intermediate_size", 8}};
  const nlohmann::json config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                                 {"model_type", "qwen3_5_moe"},
                                 {"text_config", text}};
  auto spec = parse_model_config(config, "qwen3.5-moe");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok());
  const StoredLayout* stacked = release_layout(*manifest);
  ASSERT_NE(stacked, nullptr);
  ASSERT_EQ(manifest->stored_layouts.size(), 2u);
  const StoredLayout* per_expert = &manifest->stored_layouts[1];
  const TensorManifest stored = to_stored_layout(*manifest, *stacked);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : stored.tensors) by_name[t.name] = &t;
  const std::string mlp = "model.language_model.layers.2.mlp.";
  ASSERT_TRUE(by_name.count(mlp + "experts.gate_up_proj"));
  EXPECT_EQ(by_name[mlp + "experts.gate_up_proj"]->shape, (std::vector<int64_t>{4, 8, 16}));
  EXPECT_EQ(by_name[mlp + "experts.down_proj"]->shape, (std::vector<int64_t>{4, 16, 4}));
  EXPECT_FALSE(by_name.count(mlp + "experts.1.up_proj.weight"));
  EXPECT_TRUE(by_name.count(mlp + "shared_expert.up_proj.weight"));  // not an expert of the stack
  EXPECT_TRUE(by_name.count("lm_head.weight"));
  // The checkpoint's names pick the layout: stacked, or transformers' one tensor per expert.
  const TensorManifest saved = to_stored_layout(*manifest, *per_expert);
  std::set<std::string> stacked_names, saved_names;
  for (const auto& t : stored.tensors) stacked_names.insert(t.name);
  for (const auto& t : saved.tensors) saved_names.insert(t.name);
  EXPECT_TRUE(saved_names.count(mlp + "experts.1.up_proj.weight"));
  EXPECT_EQ(
      stored_layout_in_use(*manifest, [&](const std::string& n) { return stacked_names.count(n) != 0; }),
      stacked);
  EXPECT_EQ(stored_layout_in_use(*manifest, [&](const std::string& n) { return saved_names.count(n) != 0; }),
            per_expert);
  // Qwen3_5MoeForCausalLM reads the same image-text checkpoints (transformers strips model.language_model.):
  // its table names are model.*, and its layouts rename and stack, stack only, or rename only.
  text["architectures"] = {"Qwen3_5MoeForCausalLM"};
  auto causal = parse_model_config(text, "qwen3.5-moe-text");
  ASSERT_TRUE(causal.is_ok()) << causal.status().to_string();
  auto causal_manifest = build_tensor_manifest(*causal);
  ASSERT_TRUE(causal_manifest.is_ok());
  ASSERT_EQ(causal_manifest->stored_layouts.size(), 3u);
  EXPECT_EQ(release_layout(*causal_manifest), nullptr);  // transformers saves the table's names
  const auto& causal_layouts = causal_manifest->stored_layouts;
  EXPECT_EQ(stored_layout_in_use(*causal_manifest,
                                 [&](const std::string& n) { return stacked_names.count(n) != 0; }),
            &causal_layouts[0]);
  EXPECT_EQ(
      stored_layout_in_use(*causal_manifest, [&](const std::string& n) { return saved_names.count(n) != 0; }),
      &causal_layouts[2]);
  // Expert e's up rows of gate_up_proj: rows e * 8 + 4 ... e * 8 + 7, each filled with its row index.
  auto memory = std::make_shared<MemoryTensorSource>();
  std::vector<float> gate_up(4 * 8 * 16);
  for (size_t i = 0; i < gate_up.size(); ++i) gate_up[i] = static_cast<float>(i / 16);
  std::vector<uint8_t> bytes(gate_up.size() * sizeof(float));
  std::memcpy(bytes.data(), gate_up.data(), bytes.size());
  memory->put(mlp + "experts.gate_up_proj", DType::kF32, {4, 8, 16}, bytes);
  auto view = stored_layout_source(memory, *manifest, *stacked);
  const std::string table = "language_model.model.layers.2.mlp.experts.";
  for (int e = 0; e < 4; ++e) {
    auto up = view->get(table + std::to_string(e) + ".up_proj.weight");
    ASSERT_TRUE(up.is_ok()) << up.status().to_string();
    EXPECT_EQ(up->shape, (std::vector<int64_t>{4, 16}));
    EXPECT_EQ(reinterpret_cast<const float*>(up->data.data())[0], static_cast<float>(e * 8 + 4));
    auto gate = view->get(table + std::to_string(e) + ".gate_proj.weight");
    ASSERT_TRUE(gate.is_ok()) << gate.status().to_string();
    EXPECT_EQ(reinterpret_cast<const float*>(gate->data.data())[4 * 16 - 1], static_cast<float>(e * 8 + 3));
  }
}

}  // namespace
}  // namespace day0
