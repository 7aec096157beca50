// Bad configs: every failure is a Status naming the file, the key and what was expected; nothing
// crashes, wraps around or allocates absurd amounts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "model_test_support.h"

namespace day0 {
namespace {

using nlohmann::json;

json tiny_llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 64},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

json tiny_deepseek() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", 64},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"moe_intermediate_size", 16},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"kv_lora_rank", 16},
          {"q_lora_rank", 24},
          {"qk_nope_head_dim", 8},
          {"qk_rope_head_dim", 4},
          {"v_head_dim", 8},
          {"n_routed_experts", 8},
          {"num_experts_per_tok", 2},
          {"n_group", 1},
          {"topk_group", 1},
          {"first_k_dense_replace", 1}};
}

Status parse_error_of(const json& config) {
  auto spec = parse_model_config(config, "test/config.json");
  return spec.is_ok() ? Status::ok() : spec.status();
}

void expect_message(const Status& status, StatusCode code, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(status.is_ok());
  EXPECT_EQ(status.code(), code) << status.to_string();
  for (const char* part : parts)
    EXPECT_NE(status.message().find(part), std::string::npos) << status.message();
}

TEST(BadConfig, TinyConfigsParse) {
  EXPECT_TRUE(parse_error_of(tiny_llama()).is_ok()) << parse_error_of(tiny_llama()).to_string();
  EXPECT_TRUE(parse_error_of(tiny_deepseek()).is_ok()) << parse_error_of(tiny_deepseek()).to_string();
}

TEST(BadConfig, MalformedJson) {
  auto spec = parse_model_config_text("{\"vocab_size\": 12,", "bad/config.json");
  expect_message(spec.status(), StatusCode::kParseError, {"bad/config.json", "malformed JSON"});
  auto not_object = parse_model_config_text("[1, 2]", "list.json");
  expect_message(not_object.status(), StatusCode::kInvalidArgument, {"list.json", "JSON object"});
}

TEST(BadConfig, MissingField) {
  json config = tiny_llama();
  config.erase("hidden_size");
  expect_message(parse_error_of(config), StatusCode::kInvalidArgument,
                 {"test/config.json", "hidden_size", "expected an integer >= 1", "missing"});
}

TEST(BadConfig, WrongType) {
  json config = tiny_llama();
  config["num_attention_heads"] = "four";
  expect_message(parse_error_of(config), StatusCode::kInvalidArgument,
                 {"num_attention_heads", "expected an integer", "\"four\""});
  json rope = tiny_llama();
  rope["rope_scaling"] = {{"rope_type", "linear"}, {"factor", "x2"}};
  expect_message(parse_error_of(rope), StatusCode::kInvalidArgument, {"rope_scaling.factor", "a number"});
}

TEST(BadConfig, ZeroAndNegativeSizes) {
  for (const char* key : {"hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size"}) {
    for (int value : {0, -3}) {
      json config = tiny_llama();
      config[key] = value;
      expect_message(parse_error_of(config), StatusCode::kInvalidArgument,
                     {key, std::to_string(value).c_str()});
    }
  }
}

TEST(BadConfig, KvHeadsMustDivideHeads) {
  json config = tiny_llama();
  config["num_key_value_heads"] = 3;
  expect_message(parse_error_of(config), StatusCode::kInvalidArgument, {"num_key_value_heads", "divide"});
}

TEST(BadConfig, HugeExpertCountIsRejectedNotWrapped) {
  json config = tiny_deepseek();
  config["n_routed_experts"] = 1000000000000000;  // 10^15
  expect_message(parse_error_of(config), StatusCode::kInvalidArgument,
                 {"n_routed_experts", "1000000000000000"});
  json beyond_int64 = tiny_deepseek();
  beyond_int64["n_routed_experts"] = 18446744073709551615ull;
  expect_message(parse_error_of(beyond_int64), StatusCode::kInvalidArgument, {"n_routed_experts"});
}

TEST(BadConfig, SizeProductsThatOverflowAreErrors) {
  json config = tiny_llama();
  config["vocab_size"] = int64_t{1} << 40;
  config["hidden_size"] = int64_t{1} << 40;  // vocab x hidden = 2^80
  config["head_dim"] = 8;
  expect_message(parse_error_of(config), StatusCode::kOutOfRange, {"embed_tokens", "overflow"});
}

TEST(BadConfig, UnknownArchitectureNamesNearestFamily) {
  json config = tiny_llama();
  config["architectures"] = {"LlamaForCausalLMX"};
  // transformers saves every key of the class: with llama's two switches present, llama is the one family
  // that reads all keys and lacks none (a config without them reads as Mistral's just as well).
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  expect_message(parse_error_of(config), StatusCode::kUnsupported,
                 {"LlamaForCausalLMX", "supported families", "deepseek_v3",
                  "nearest known by structure: LlamaForCausalLM (family llama reads every key"});
  json no_identity = tiny_llama();
  no_identity.erase("architectures");
  no_identity.erase("model_type");
  expect_message(parse_error_of(no_identity), StatusCode::kInvalidArgument, {"architectures", "model_type"});
}

// The hint compares what each family's parser reads, not names: a Seed-OSS config under a new name is
// nearest to seed_oss (not gpt_oss, whose name is closer), and a llama with two keys llama does not read
// names llama and those two keys.
TEST(BadConfig, NearestFamilyIsFoundByTheKeysItsParserReads) {
  json seed = tiny_llama();
  seed["architectures"] = {"SeedOssNextForCausalLM"};
  seed["model_type"] = "seed_oss_next";
  seed["attention_out_bias"] = true;
  seed["residual_dropout"] = 0.1;
  seed["attention_dropout"] = 0.1;
  expect_message(
      parse_error_of(seed), StatusCode::kUnsupported,
      {"SeedOssNextForCausalLM", "nearest known by structure: SeedOssForCausalLM (family seed_oss"});
  json hybrid = tiny_llama();
  hybrid["architectures"] = {"MistralHybridForCausalLM"};
  hybrid["model_type"] = "mistral_hybrid";
  hybrid["hybrid_override_pattern"] = "M*M*";
  hybrid["mamba_num_heads"] = 8;
  hybrid["attention_bias"] = false;
  hybrid["mlp_bias"] = false;
  expect_message(parse_error_of(hybrid), StatusCode::kUnsupported,
                 {"nearest known by structure: LlamaForCausalLM (family llama reads all but 2 of its keys",
                  "hybrid_override_pattern", "mamba_num_heads"});
  json nothing = {{"architectures", {"SomethingElse"}}, {"model_type", "something_else"}};
  expect_message(parse_error_of(nothing), StatusCode::kUnsupported,
                 {"SomethingElse", "no supported family's parser reads this config"});
}

// transformers saves some model types under an architecture string Day0 knows, with tensor names of
// their own (sarvam_mla as DeepseekV3ForCausalLM): refused by model_type, before any tensor is looked
// up. Those with a family of their own (exaone as LlamaForCausalLM, sarvam_moe as Glm4MoeForCausalLM)
// are that family, whatever the architecture string: transformers builds them by model_type.
TEST(BadConfig, KnownArchitectureUnderAForeignModelTypeIsRefusedByName) {
  json sarvam_mla = tiny_deepseek();
  sarvam_mla["model_type"] = "sarvam_mla";
  expect_message(parse_error_of(sarvam_mla), StatusCode::kUnsupported,
                 {"model_type \"sarvam_mla\"", "DeepseekV3ForCausalLM", "its own modules and tensor names"});
  json exaone = tiny_llama();
  exaone["model_type"] = "exaone";
  auto spec = parse_model_config(exaone, "exaone");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "exaone");
  exaone["architectures"] = {"ExaoneForCausalLM"};
  spec = parse_model_config(exaone, "exaone");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "exaone");
  // The family's own aliases still read: kimi_k2 is a DeepseekV3ForCausalLM model type.
  json kimi = tiny_deepseek();
  kimi["model_type"] = "kimi_k2";
  EXPECT_TRUE(parse_model_config(kimi, "kimi").is_ok());
  // A Llama config without a model_type stays Llama's.
  json llama = tiny_llama();
  llama.erase("model_type");
  spec = parse_model_config(llama, "llama");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "llama");
}

// A fused q/k/v tensor splits into row views of unquantized or FP8 weights (whole scale blocks only);
// packed integers have no such rows: refused naming the model_type and the layout.
TEST(BadConfig, FusedQkvLayoutRefusesWhatItCannotSplit) {
  json sarvam = tiny_llama();
  sarvam["architectures"] = {"SarvamMoEForCausalLM"};
  sarvam["model_type"] = "sarvam_moe";
  sarvam["num_experts"] = 4;
  sarvam["num_experts_per_tok"] = 2;
  sarvam["moe_intermediate_size"] = 16;
  sarvam["head_dim"] = 8;  // q 32 rows, k and v 16: no whole 128-row scale block
  ASSERT_TRUE(parse_model_config(sarvam, "sarvam").is_ok());
  json packed = sarvam;
  packed["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}};
  expect_message(parse_error_of(packed), StatusCode::kUnsupported,
                 {"model_type sarvam_moe", "attention.query_key_value", "packed integer weights"});
  json fp8 = sarvam;
  fp8["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  expect_message(parse_error_of(fp8), StatusCode::kUnsupported,
                 {"model_type sarvam_moe", "attention.query_key_value", "scale blocks"});
}

TEST(BadConfig, UnsupportedQuantizationAndRope) {
  json quant = tiny_llama();
  quant["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  expect_message(parse_error_of(quant), StatusCode::kUnsupported, {"bitsandbytes"});
  // GPTQ is read now; one without its bit width names the key.
  json gptq = tiny_llama();
  gptq["quantization_config"] = {{"quant_method", "gptq"}};
  expect_message(parse_error_of(gptq), StatusCode::kInvalidArgument, {"quantization_config.bits"});
  json rope = tiny_llama();
  rope["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  expect_message(parse_error_of(rope), StatusCode::kUnsupported, {"longrope"});
  json mxfp4 = tiny_llama();
  mxfp4["quantization_config"] = {{"quant_method", "mxfp4"}};
  expect_message(parse_error_of(mxfp4), StatusCode::kUnsupported, {"mxfp4", "gpt_oss"});
}

TEST(BadConfig, UnreadablePaths) {
  auto missing = load_model_config("/nonexistent/day0/config.json");
  expect_message(missing.status(), StatusCode::kNotFound, {"/nonexistent/day0/config.json"});
  auto directory = load_model_config(std::filesystem::temp_directory_path());
  expect_message(directory.status(), StatusCode::kInvalidArgument, {"directory"});
}

// Variant / transcribed configs from other runtimes: each parses or fails with a clear message.
TEST(BadConfig, VariantConfigsParseOrFailClearly) {
  const auto dir = testing::shared_configs_dir();
  if (dir.empty()) GTEST_SKIP() << "shared configs not found";
  int parsed = 0;
  for (const auto& folder : std::filesystem::directory_iterator(dir)) {
    if (!folder.is_directory()) continue;
    for (const auto& file : std::filesystem::directory_iterator(folder.path())) {
      const std::string name = file.path().filename().string();
      if (name.rfind("config.", 0) != 0 || name == "config.json") continue;
      SCOPED_TRACE(file.path().string());
      auto spec = load_model_config(file.path());
      if (spec.is_ok()) {
        ++parsed;
        EXPECT_TRUE(build_tensor_manifest(*spec).is_ok());
      } else {
        EXPECT_NE(spec.status().message().find(file.path().string()), std::string::npos);
        EXPECT_EQ(spec.status().code(), StatusCode::kUnsupported) << spec.status().to_string();
      }
    }
  }
  EXPECT_GE(parsed, 5);  // DeepSeek-V3-Base, DeepSeek-V2, Qwen2-57B, three Llama 4 variants
}

TEST(BadConfig, Llama4VariantsNestTextConfig) {
  const auto dir = testing::shared_configs_dir();
  if (dir.empty()) GTEST_SKIP() << "shared configs not found";
  auto scout = load_model_config(dir / "llama-4-scout" / "config.VARIANT-trimmed-aiconfigurator.json");
  ASSERT_TRUE(scout.is_ok()) << scout.status().to_string();
  EXPECT_EQ(scout->family, "llama4_text");
  EXPECT_TRUE(scout->multimodal_wrapper);
  EXPECT_EQ(scout->n_layers, 48);
  EXPECT_EQ(scout->moe->n_experts, 16);
  EXPECT_EQ(count_moe_layers(*scout), 48);
  EXPECT_FALSE(scout->layers[3].use_rope);
  EXPECT_EQ(scout->layers[0].mask, AttentionMask::kChunked);
  auto maverick = load_model_config(dir / "llama-4-maverick" / "config.VARIANT-trimmed-aiconfigurator.json");
  ASSERT_TRUE(maverick.is_ok()) << maverick.status().to_string();
  EXPECT_EQ(count_moe_layers(*maverick), 24);  // interleave_moe_layer_step 2: layers 1, 3, 5, ...
  EXPECT_TRUE(maverick->layers[1].moe);
  EXPECT_FALSE(maverick->layers[0].moe);
  EXPECT_EQ(maverick->layers[0].dense_intermediate, 16384);
}

TEST(BadConfig, Llama4TemperatureTuningAsNumberOrBool) {
  json text = {{"vocab_size", 64},       {"hidden_size", 32},        {"intermediate_size", 16},
               {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"head_dim", 8}};
  for (const auto& [value, expected] :
       std::vector<std::pair<json, bool>>{{4, true}, {0, false}, {true, true}}) {
    text["attn_temperature_tuning"] = value;
    auto spec = parse_model_config({{"architectures", {"Llama4ForCausalLM"}}, {"text_config", text}}, "t");
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    EXPECT_EQ(spec->attn_temperature_tuning, expected);
  }
  text["attn_temperature_tuning"] = "yes";
  auto bad = parse_model_config({{"architectures", {"Llama4ForCausalLM"}}, {"text_config", text}}, "t");
  expect_message(bad.status(), StatusCode::kInvalidArgument, {"text_config.attn_temperature_tuning"});
}

}  // namespace
}  // namespace day0
