// quantization_config forms of the 2026 DeepSeek releases (FP8 in 32x32 blocks with ue8m0 scales, FP4
// routed experts), their round trip through config.json, the manifest they give, and the schemes and
// values Day0 does not read: each refused with a message naming the key and what it found.
#include <gtest/gtest.h>

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
  expect_refused({{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}, {"quant_method", "modelopt"});
  expect_refused({{"quant_method", "compressed-tensors"}, {"format", "nvfp4-pack-quantized"}},
                 {"format", "nvfp4-pack-quantized"});
}

}  // namespace
}  // namespace day0
