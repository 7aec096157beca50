// quantization_config forms of the 2026 DeepSeek releases (FP8 in 32x32 blocks with ue8m0 scales, FP4
// routed experts), their round trip through config.json, the manifest they give, and the schemes and
// values Day0 does not read: each refused with a message naming the key and what it found. NVFP4 in
// ModelOpt's and compressed-tensors' layouts: the modules each quantizes and the tensors it stores.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {
namespace {

using nlohmann::json;

json deepseek_config(const json& quantization) {
  json c = to_hf_config(catalog_model("deepseek-v3").value());
  c["quantization_config"] = quantization;
  return c;
}

json v4_fp8(const std::vector<int64_t>& block) {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"scale_fmt", "ue8m0"},
          {"weight_block_size", block}};
}

TEST(QuantizationConfig, DeepseekV4FormsParseAndRoundTrip) {
  json q = v4_fp8({32, 32});
  q["expert_dtype"] = "fp4";
  auto spec = parse_model_config(deepseek_config(q), "v4");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->weights.format, WeightFormat::kFp8Block);
  EXPECT_EQ(spec->weights.block_rows, 32);
  EXPECT_TRUE(spec->weights.ue8m0_scales);
  EXPECT_EQ(spec->weights.fp8_scale_dtype(), DType::kF8E8M0);
  EXPECT_EQ(spec->weights.fp4_expert_group, 32);
  auto again = parse_model_config(to_hf_config(*spec), "written");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*again == *spec);

  // V3.1 / V3.2: ue8m0 over 128x128 blocks keeps float32 scales; experts default to FP8.
  auto v32 = parse_model_config(deepseek_config(v4_fp8({128, 128})), "v3.2");
  ASSERT_TRUE(v32.is_ok());
  EXPECT_EQ(v32->weights.fp8_scale_dtype(), DType::kF32);
  EXPECT_EQ(v32->weights.fp4_expert_group, 0);
}

// FP4 experts: I8 nibbles [out, in/2] holding in*out parameters, E8M0 scales [out, in/32] holding none;
// the shared expert and attention stay FP8 with their block scales.
TEST(QuantizationConfig, Fp4ExpertsInTheManifest) {
  json q = v4_fp8({32, 32});
  q["expert_dtype"] = "fp4";
  auto spec = parse_model_config(deepseek_config(q), "v4");
  ASSERT_TRUE(spec.is_ok());
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok());
  const int64_t h = spec->hidden_size, inter = spec->moe->expert_intermediate;
  int experts = 0, shared = 0;
  for (const TensorSpec& t : manifest->tensors) {
    if (t.mtp) continue;  // the MTP layer's experts are FP4 too, counted apart
    if (t.name.find(".mlp.experts.") != std::string::npos && t.name.ends_with("gate_proj.weight")) {
      EXPECT_EQ(t.dtype, DType::kI8);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{inter, h / 2}));
      EXPECT_EQ(t.params, inter * h);
      EXPECT_EQ(t.bytes, static_cast<uint64_t>(inter * h / 2));
      ++experts;
    } else if (t.name.find(".mlp.experts.") != std::string::npos &&
               t.name.ends_with("gate_proj.weight_scale_inv")) {
      EXPECT_EQ(t.dtype, DType::kF8E8M0);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{inter, h / 32}));
      EXPECT_EQ(t.params, 0);
      EXPECT_EQ(t.bytes, static_cast<uint64_t>(inter * h / 32));
    } else if (t.name.find(".mlp.shared_experts.gate_proj.weight") != std::string::npos &&
               t.name.ends_with(".weight")) {
      EXPECT_EQ(t.dtype, DType::kF8E4M3);
      ++shared;
    }
  }
  EXPECT_EQ(experts, static_cast<int>(spec->moe->n_experts * count_moe_layers(*spec)));
  EXPECT_GT(shared, 0);
}

void expect_refused(const json& quantization, const std::vector<std::string>& named) {
  auto spec = parse_model_config(deepseek_config(quantization), "config.json");
  ASSERT_FALSE(spec.is_ok()) << quantization.dump();
  for (const auto& word : named)
    EXPECT_NE(spec.status().message().find(word), std::string::npos)
        << "'" << word << "' not in: " << spec.status().message();
}

TEST(QuantizationConfig, SchemesNotUnderstoodNameTheKeyAndTheScheme) {
  json bad_expert = v4_fp8({32, 32});
  bad_expert["expert_dtype"] = "fp6";
  expect_refused(bad_expert, {"expert_dtype", "fp6"});
  json bad_scale = v4_fp8({32, 32});
  bad_scale["scale_fmt"] = "e5m2";
  expect_refused(bad_scale, {"scale_fmt", "e5m2"});
}

json llama_config(const json& quantization) {
  json c = to_hf_config(catalog_model("llama-3.1-8b").value());
  c["quantization_config"] = quantization;
  return c;
}

json modelopt_nvfp4() {
  return {{"quant_method", "modelopt"},
          {"quant_algo", "NVFP4"},
          {"group_size", 16},
          {"exclude_modules", {"lm_head", "model.layers.0.mlp*", "model.layers.1.self_attn"}},
          {"kv_cache_quant_algo", nullptr},
          {"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}}};
}

json ct_nvfp4(bool activations) {
  const json args = {{"num_bits", 4},    {"type", "float"},   {"strategy", "tensor_group"},
                     {"group_size", 16}, {"symmetric", true}, {"dynamic", false}};
  json inputs = args;
  inputs["dynamic"] = "local";
  return {{"quant_method", "compressed-tensors"},
          {"format", "nvfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", args},
              {"input_activations", activations ? inputs : json(nullptr)},
              {"format", "nvfp4-pack-quantized"}}}}},
          {"ignore", {"lm_head"}}};
}

// The tensor of `manifest` named `name`, or null.
const TensorSpec* find_tensor(const TensorManifest& manifest, const std::string& name) {
  for (const TensorSpec& t : manifest.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// ModelOpt: quantized projections are U8 nibbles [out, in/2] holding out*in parameters, E4M3 scales
// [out, in/16], 0-D F32 weight_scale_2 and input_scale; exclude_modules globs keep a whole MLP (a module
// prefix) and a whole attention (a module name without a glob) unquantized; lm_head stays plain.
TEST(QuantizationConfig, ModelOptNvfp4ParsesAndSelectsModules) {
  auto spec = parse_model_config(llama_config(modelopt_nvfp4()), "config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->weights.nvfp4.layout, Nvfp4Layout::kModelOpt);
  EXPECT_TRUE(spec->weights.nvfp4.activation_scales);
  auto again = parse_model_config(to_hf_config(*spec), "written");
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_TRUE(*again == *spec);
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  const int64_t h = spec->hidden_size, inter = spec->intermediate_size;
  const TensorSpec* down = find_tensor(*manifest, "model.layers.2.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kU8);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{h, inter / 2}));
  EXPECT_EQ(down->params, h * inter);
  EXPECT_EQ(down->bytes, static_cast<uint64_t>(h * inter / 2));
  const TensorSpec* scale = find_tensor(*manifest, "model.layers.2.mlp.down_proj.weight_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->dtype, DType::kF8E4M3);
  EXPECT_EQ(scale->shape, (std::vector<int64_t>{h, inter / 16}));
  EXPECT_EQ(scale->params, 0);
  for (const char* scalar : {"weight_scale_2", "input_scale"}) {
    const TensorSpec* t = find_tensor(*manifest, std::string("model.layers.2.mlp.down_proj.") + scalar);
    ASSERT_NE(t, nullptr) << scalar;
    EXPECT_EQ(t->dtype, DType::kF32);
    EXPECT_TRUE(t->shape.empty());
    EXPECT_EQ(t->bytes, 4u);
    EXPECT_EQ(t->params, 0);
  }
  for (const char* plain :
       {"model.layers.0.mlp.down_proj.weight", "model.layers.1.self_attn.q_proj.weight", "lm_head.weight"}) {
    const TensorSpec* t = find_tensor(*manifest, plain);
    ASSERT_NE(t, nullptr) << plain;
    EXPECT_EQ(t->dtype, spec->activation_dtype) << plain;
  }
  EXPECT_EQ(find_tensor(*manifest, "model.layers.0.mlp.down_proj.weight_scale"), nullptr);
  EXPECT_NE(find_tensor(*manifest, "model.layers.0.self_attn.q_proj.weight_scale"), nullptr);
  // "model.layers.1.self_attn" names a module, not a prefix of "model.layers.10".
  EXPECT_NE(find_tensor(*manifest, "model.layers.10.self_attn.q_proj.weight_scale"), nullptr);
}

// compressed-tensors: weight_packed / weight_scale / weight_global_scale [1], input_global_scale only where
// the config quantizes activations (the nvfp4 preset; NVFP4A16 has none).
TEST(QuantizationConfig, CompressedTensorsNvfp4ParsesAndRoundTrips) {
  for (bool activations : {true, false}) {
    auto spec = parse_model_config(llama_config(ct_nvfp4(activations)), "config.json");
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_EQ(spec->weights.nvfp4.layout, Nvfp4Layout::kCompressedTensors);
    EXPECT_EQ(spec->weights.nvfp4.activation_scales, activations);
    auto again = parse_model_config(to_hf_config(*spec), "written");
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_TRUE(*again == *spec);
    auto manifest = build_tensor_manifest(*spec);
    ASSERT_TRUE(manifest.is_ok());
    const std::string stem = "model.layers.0.self_attn.o_proj";
    const TensorSpec* packed = find_tensor(*manifest, stem + ".weight_packed");
    ASSERT_NE(packed, nullptr);
    EXPECT_EQ(packed->dtype, DType::kU8);
    EXPECT_EQ(packed->params, spec->hidden_size * spec->n_heads * spec->head_dim);
    const TensorSpec* global = find_tensor(*manifest, stem + ".weight_global_scale");
    ASSERT_NE(global, nullptr);
    EXPECT_EQ(global->shape, (std::vector<int64_t>{1}));
    EXPECT_EQ(find_tensor(*manifest, stem + ".input_global_scale") != nullptr, activations);
    EXPECT_EQ(find_tensor(*manifest, stem + ".weight"), nullptr);
  }
}

// ModelOpt exports that keep the scheme beside config.json: hf_quant_config.json's "quantization" object is
// read as quantization_config; a config.json that has one wins.
TEST(QuantizationConfig, ModelOptSchemeFromHfQuantConfigJson) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("day0-hf-quant-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  json bare = llama_config(json(nullptr));
  bare.erase("quantization_config");
  std::ofstream(dir / "config.json") << bare.dump();
  json scheme = modelopt_nvfp4();
  scheme.erase("quant_method");
  scheme.erase("producer");
  std::ofstream(dir / "hf_quant_config.json")
      << json{{"producer", {{"name", "modelopt"}}}, {"quantization", scheme}}.dump();
  auto spec = load_model_config(dir / "config.json");
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  if (spec.is_ok()) {
    EXPECT_EQ(spec->weights.nvfp4.layout, Nvfp4Layout::kModelOpt);
  }
  scheme["quant_algo"] = "FP8";
  std::ofstream(dir / "hf_quant_config.json") << json{{"quantization", scheme}}.dump();
  auto refused = load_model_config(dir / "config.json");
  EXPECT_FALSE(refused.is_ok());
  if (!refused.is_ok()) {
    EXPECT_NE(refused.status().message().find("hf_quant_config.json"), std::string::npos);
    EXPECT_NE(refused.status().message().find("quant_algo"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST(QuantizationConfig, Nvfp4SchemesNotUnderstoodNameTheKeyExpectedAndFound) {
  const auto refused = [](const json& q, const std::vector<std::string>& named) {
    auto spec = parse_model_config(llama_config(q), "config.json");
    ASSERT_FALSE(spec.is_ok()) << q.dump();
    for (const auto& word : named)
      EXPECT_NE(spec.status().message().find(word), std::string::npos)
          << "'" << word << "' not in: " << spec.status().message();
  };
  json algo = modelopt_nvfp4();
  algo["quant_algo"] = "W4A8_AWQ";
  refused(algo, {"config.json", "quant_algo", "NVFP4", "W4A8_AWQ"});
  json group = modelopt_nvfp4();
  group["group_size"] = 32;
  refused(group, {"group_size", "16", "32"});
  json kv = modelopt_nvfp4();
  kv["kv_cache_quant_algo"] = "FP8";
  refused(kv, {"kv_cache_quant_algo", "FP8"});
  json type = ct_nvfp4(false);
  type["config_groups"]["group_0"]["weights"]["type"] = "int";
  refused(type, {"config_groups.group_0.weights.type", "\"float\"", "\"int\""});
  json bits = ct_nvfp4(true);
  bits["config_groups"]["group_0"]["input_activations"]["num_bits"] = 8;
  refused(bits, {"input_activations.num_bits", "4", "8"});
  json ct_group = ct_nvfp4(false);
  ct_group["config_groups"]["group_0"]["weights"]["group_size"] = 32;
  refused(ct_group, {"weights.group_size", "16", "32"});
}

}  // namespace
}  // namespace day0
