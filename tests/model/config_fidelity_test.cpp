// Configs as transformers' own config classes write them (tests/model/configs, made by
// tools/reference/make_config_fixtures.py with transformers 4.57 and 5.24): both spellings read to
// the spec of the golden miniature they were made from, every key is accounted for, and the four
// misreadings of issue 15 stay fixed.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "day0/model/config_parser.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

fs::path configs_dir() {
  return fs::path(DAY0_TEST_DATA_DIR) / "model" / "configs";
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

Result<ModelSpec> parse_fixture(const std::string& name, ConfigAudit* audit = nullptr) {
  return load_model_config(configs_dir() / name, audit);
}

struct Fixture {
  std::string name;  // golden miniature, e.g. "deepseek-v3"
  std::string tag;   // "v4" or "v5"
};

std::vector<Fixture> golden_fixtures() {
  std::vector<Fixture> out;
  for (const auto& entry : fs::directory_iterator(fs::path(DAY0_TEST_DATA_DIR) / "golden")) {
    if (!entry.is_directory()) continue;
    for (const char* tag : {"v4", "v5"}) out.push_back({entry.path().filename().string(), tag});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.name + a.tag < b.name + b.tag; });
  return out;
}

class TransformersConfig : public ::testing::TestWithParam<Fixture> {};

// The config transformers wrote reads to the same spec as the golden config (the same keys, as
// make_golden passed them), and no key is left unaccounted for.
TEST_P(TransformersConfig, ReadsAsTheGoldenAndAccountsForEveryKey) {
  const Fixture& f = GetParam();
  ConfigAudit audit;
  auto spec = parse_fixture(f.name + "." + f.tag + ".json", &audit);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto golden = load_model_config(fs::path(DAY0_TEST_DATA_DIR) / "golden" / f.name / "config.json");
  ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
  EXPECT_TRUE(*spec == *golden) << f.name << "." << f.tag << " reads differently from the golden config";
  EXPECT_TRUE(audit.unknown_keys.empty()) << unknown_keys_text(audit);
}

INSTANTIATE_TEST_SUITE_P(Goldens, TransformersConfig, ::testing::ValuesIn(golden_fixtures()),
                         [](const auto& param_info) {
                           std::string n = param_info.param.name + "_" + param_info.param.tag;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

class BothSpellings : public ::testing::TestWithParam<std::string> {};

// Regression: GLM-4.5's partial_rotary_factor lives in rope_parameters in transformers 5; Day0 read
// only the top-level key and silently used 0.5.
TEST_P(BothSpellings, GlmPartialRotaryFactor) {
  auto spec = parse_fixture("glm-4.5-partial-0.75." + GetParam() + ".json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_DOUBLE_EQ(spec->partial_rotary_factor, 0.75);
}

// Regression: gpt-oss's swiglu_alpha was ignored (1.702 always).
TEST_P(BothSpellings, GptOssSwigluAlphaAndLimit) {
  auto spec = parse_fixture("gpt-oss-alpha-1.5." + GetParam() + ".json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_TRUE(spec->moe.has_value());
  EXPECT_DOUBLE_EQ(spec->moe->swiglu_alpha, 1.5);
  EXPECT_DOUBLE_EQ(spec->moe->swiglu_limit, 5.0);
}

// Regression: Qwen2-MoE with use_sliding_window false: transformers 5 writes sliding_window 0, which
// Day0 refused.
TEST_P(BothSpellings, QwenSlidingWindowOff) {
  auto spec = parse_fixture("qwen2-moe-no-sliding." + GetParam() + ".json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->sliding_window, 0);
  EXPECT_EQ(count_masked_layers(*spec, AttentionMask::kSliding), 0);
}

// Regression: Qwen3-MoE's expert count saved under transformers 5's attribute name
// num_local_experts was refused ("num_experts ... key is missing").
TEST_P(BothSpellings, Qwen3MoeExpertCountAlias) {
  auto spec = parse_fixture("qwen3-moe-experts." + GetParam() + ".json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_TRUE(spec->moe.has_value());
  EXPECT_EQ(spec->moe->n_experts, 8);
}

// MiniMax-M2 releases give rotary_dim, which transformers turns into partial_rotary_factor (v5 saves
// both); without it the class default rotates every dimension.
TEST_P(BothSpellings, MinimaxRotaryDim) {
  auto spec = parse_fixture("minimax-m2-rotary-4." + GetParam() + ".json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_DOUBLE_EQ(spec->partial_rotary_factor, 0.25);
  auto full = parse_fixture("minimax-m2-no-rotary-dim." + GetParam() + ".json");
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  EXPECT_DOUBLE_EQ(full->partial_rotary_factor, 1.0);
  EXPECT_TRUE(full->qk_norm_full_width);
}

INSTANTIATE_TEST_SUITE_P(Transformers, BothSpellings, ::testing::Values("v4", "v5"));

TEST(ConfigAudit, UnknownKeyIsReportedAndStrictRefusesIt) {
  nlohmann::json config = read_json(configs_dir() / "qwen3-moe.v5.json");
  config["rope_parameters"]["mrope_section"] = {8, 8};
  config["new_attention_twist"] = true;
  ConfigAudit audit;
  auto spec = parse_model_config(config, "twist.json", &audit);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(audit.unknown_keys,
            (std::vector<std::string>{"new_attention_twist", "rope_parameters.mrope_section"}));
  EXPECT_NE(unknown_keys_text(audit).find("new_attention_twist: unknown field"), std::string::npos);

  auto strict = parse_model_config(config, "twist.json", nullptr, /*strict=*/true);
  ASSERT_FALSE(strict.is_ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(strict.status().message().find("new_attention_twist"), std::string::npos)
      << strict.status().to_string();
}

// A known key with a value Day0 does not implement is an unsupported-feature error naming key and
// value, never a silent default.
TEST(ConfigAudit, UnimplementedValuesAreErrors) {
  struct Case {
    const char* fixture;
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {
      {"llama3.v5.json", "attention_dropout", 0.1},
      {"llama3.v5.json", "hidden_act", "gelu"},
      {"deepseek-v3.v5.json", "moe_layer_freq", 2},
      // MiniMax-M2 switches transformers hard-codes to the released values.
      {"minimax-m2.v5.json", "use_qk_norm", false},
      {"minimax-m2.v5.json", "qk_norm_type", "per_head"},
      {"minimax-m2.v5.json", "scoring_func", "softmax"},
      {"minimax-m2.v5.json", "use_routing_bias", false},
      {"minimax-m2.v5.json", "shared_intermediate_size", 1536},
      {"minimax-m2.v4.json", "attn_type_list", nlohmann::json::array({1, 0})},
      // LongCat-Flash switches transformers hard-codes (router_bias: allocated, never added).
      {"longcat-flash.v5.json", "mla_scale_q_lora", false},
      {"longcat-flash.v5.json", "mla_scale_kv_lora", false},
      {"longcat-flash.v4.json", "zero_expert_type", "constant"},
      {"longcat-flash.v5.json", "router_bias", true},
      {"longcat-flash.v5.json", "q_lora_rank", nullptr},
      // DeepSeek-V3.2: transformers hard-codes sigmoid noaux_tc routing, interleaved MLA rope and q LoRA.
      {"deepseek-v32.v5.json", "scoring_func", "softmax"},
      {"deepseek-v32.v4.json", "topk_method", "greedy"},
      {"deepseek-v32.v4.json", "rope_interleave", false},
      {"deepseek-v32.v5.json", "q_lora_rank", nullptr},
      // Qwen3-Next: hidden_act drives the MLPs and the Gated DeltaNet conv alike.
      {"qwen3-next.v4.json", "hidden_act", "gelu"},
      {"qwen3-next.v5.json", "attention_dropout", 0.1},
      // Gemma 4: bidirectional text, RoPE keys transformers' Gemma 4 never reads at the top level, another
      // activation.
      {"gemma4.v5.json", "use_bidirectional_attention", "all"},
      {"gemma4.v4.json", "rope_theta", 10000.0},
      {"gemma4.v4.json", "hidden_activation", "gelu"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = read_json(configs_dir() / c.fixture);
    config[c.key] = c.value;
    auto spec = parse_model_config(config, c.fixture);
    ASSERT_FALSE(spec.is_ok()) << c.key;
    EXPECT_EQ(spec.status().code(), StatusCode::kUnsupported) << spec.status().to_string();
    EXPECT_NE(spec.status().message().find(c.key), std::string::npos) << spec.status().to_string();
  }
  // An FP8 activation scheme other than dynamic.
  nlohmann::json config = read_json(configs_dir() / "deepseek-v3.v5.json");
  config["quantization_config"]["activation_scheme"] = "static";
  auto spec = parse_model_config(config, "static.json");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_NE(spec.status().message().find("activation_scheme"), std::string::npos);
}

// MiniMax-M2: a rotary_dim that disagrees with the partial_rotary_factor saved beside it is an error
// (transformers would take the factor, the release's own code the dimension).
TEST(ConfigAudit, MinimaxRotaryDimDisagreeingWithTheFactorIsAnError) {
  nlohmann::json config = read_json(configs_dir() / "minimax-m2.v5.json");
  config["rotary_dim"] = 4;  // rope_parameters.partial_rotary_factor stays 0.5 of head_dim 16
  auto spec = parse_model_config(config, "rotary.json");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_NE(spec.status().message().find("rotary_dim"), std::string::npos) << spec.status().to_string();
}

// LongCat-Flash: both spellings give the same spec: num_layers Hugging Face layers of two MLA
// sublayers (engine layers), the MLP and expert widths under their attribute_map names, the zero
// experts, LoRA rescaling and the RoPE width from head_dim.
TEST(ConfigFidelity, LongcatFlashBothSpellings) {
  auto v4 = parse_fixture("longcat-flash.v4.json");
  auto v5 = parse_fixture("longcat-flash.v5.json");
  ASSERT_TRUE(v4.is_ok()) << v4.status().to_string();
  ASSERT_TRUE(v5.is_ok()) << v5.status().to_string();
  EXPECT_TRUE(*v4 == *v5);
  const ModelSpec& s = *v5;
  EXPECT_EQ(s.n_layers, 4);  // num_layers 2, two sublayers each
  EXPECT_TRUE(s.shortcut_moe);
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(s.layers[static_cast<size_t>(l)].moe, l % 2 == 0);
    EXPECT_EQ(s.layers[static_cast<size_t>(l)].dense_intermediate, 96);
  }
  ASSERT_TRUE(s.moe && s.mla);
  EXPECT_EQ(s.moe->n_experts, 8);
  EXPECT_EQ(s.moe->n_zero_experts, 4);
  EXPECT_EQ(s.moe->experts_per_token, 3);
  EXPECT_EQ(s.moe->expert_intermediate, 32);
  EXPECT_FALSE(s.moe->norm_topk_prob);
  EXPECT_EQ(s.moe->scoring, RouterScoring::kSoftmax);
  EXPECT_DOUBLE_EQ(s.moe->routed_scaling_factor, 6.0);
  EXPECT_DOUBLE_EQ(s.mla->q_scale, std::sqrt(64.0 / 48.0));
  EXPECT_DOUBLE_EQ(s.mla->latent_scale, std::sqrt(64.0 / 32.0));
  EXPECT_EQ(s.rope_layout, RopeLayout::kInterleaved);
  EXPECT_DOUBLE_EQ(s.rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(s.rms_norm_eps, 1e-5);
}

// LongCat-Flash: transformers 4 writes num_hidden_layers beside num_layers (its default 56 when only
// num_layers is given), and transformers 5 lets num_hidden_layers win (num_layers = 28): a value that
// is not 2 * num_layers is an error naming it. A head_dim other than qk_rope_head_dim (the rotary
// embedding's width) is an error, as is num_key_value_heads != num_attention_heads.
TEST(ConfigAudit, LongcatFlashInconsistentLayerCountsAndWidthsAreErrors) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"num_hidden_layers", 56}, {"head_dim", 16}, {"num_key_value_heads", 2}};
  for (const auto& [key, value] : cases) {
    nlohmann::json config = read_json(configs_dir() / "longcat-flash.v4.json");
    config[key] = value;
    auto spec = parse_model_config(config, "longcat.json");
    ASSERT_FALSE(spec.is_ok()) << key;
    EXPECT_NE(spec.status().message().find(key), std::string::npos) << spec.status().to_string();
  }
}

// DeepSeek-V3.2: both spellings give the same spec: V3's MLA and noaux_tc MoE (dense layer 0 from
// first_k_dense_replace in v4, mlp_layer_types in v5), the indexer sizes, and the RoPE width from
// qk_rope_head_dim whatever head_dim says (transformers 5 overwrites head_dim with it).
TEST(ConfigFidelity, DeepseekV32BothSpellings) {
  auto v4 = parse_fixture("deepseek-v32.v4.json");
  auto v5 = parse_fixture("deepseek-v32.v5.json");
  ASSERT_TRUE(v4.is_ok()) << v4.status().to_string();
  ASSERT_TRUE(v5.is_ok()) << v5.status().to_string();
  EXPECT_TRUE(*v4 == *v5);
  const ModelSpec& s = *v5;
  ASSERT_TRUE(s.indexer && s.mla && s.moe);
  EXPECT_EQ(s.indexer->n_heads, 8);
  EXPECT_EQ(s.indexer->head_dim, 16);
  EXPECT_EQ(s.indexer->topk, 4);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(s.rope.type, RopeType::kYarn);
  EXPECT_EQ(s.moe->topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(s.moe->n_experts, 8);
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(s.layers[static_cast<size_t>(l)].moe, l > 0) << l;
  // head_dim is the rope width transformers derives, not read: another value changes nothing.
  nlohmann::json config = read_json(configs_dir() / "deepseek-v32.v4.json");
  config["head_dim"] = 128;
  auto wide = parse_model_config(config, "head_dim.json");
  ASSERT_TRUE(wide.is_ok()) << wide.status().to_string();
  EXPECT_TRUE(*wide == s);
  // num_experts is rerouted to n_routed_experts by the config class (it wins over it).
  for (const char* fixture : {"deepseek-v32-num-experts.v4.json", "deepseek-v32-num-experts.v5.json"}) {
    auto rerouted = parse_fixture(fixture);
    ASSERT_TRUE(rerouted.is_ok()) << rerouted.status().to_string();
    EXPECT_EQ(rerouted->moe->n_experts, 4) << fixture;
  }
}

// DeepSeek-V3.2: mlp_layer_types decides over first_k_dense_replace; layer_types must say
// "indexed_attention" for every layer, and both lists must have num_hidden_layers entries.
TEST(ConfigAudit, DeepseekV32LayerTypeLists) {
  nlohmann::json config = read_json(configs_dir() / "deepseek-v32.v5.json");
  config["mlp_layer_types"] = {"dense", "dense", "sparse"};
  auto two_dense = parse_model_config(config, "mlp.json");
  ASSERT_TRUE(two_dense.is_ok()) << two_dense.status().to_string();
  EXPECT_FALSE(two_dense->layers[1].moe);
  EXPECT_EQ(two_dense->layers[1].dense_intermediate, 128);
  EXPECT_TRUE(two_dense->layers[2].moe);
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"layer_types", {"indexed_attention", "full_attention", "indexed_attention"}},
      {"layer_types", {"indexed_attention"}},
      {"mlp_layer_types", {"dense", "moe", "sparse"}},
      {"mlp_layer_types", {"dense", "sparse"}}};
  for (const auto& [key, value] : bad) {
    nlohmann::json c = read_json(configs_dir() / "deepseek-v32.v5.json");
    c[key] = value;
    auto spec = parse_model_config(c, "types.json");
    ASSERT_FALSE(spec.is_ok()) << key << " " << value.dump();
    EXPECT_NE(spec.status().message().find(key), std::string::npos) << spec.status().to_string();
  }
}

// Qwen3-Next: both spellings give the same spec: layer kinds from full_attention_interval (v4, beside the
// layer_types it derives) or layer_types (v5), partial rotary 0.25 at the top level (v4) or in
// rope_parameters (v5), the Gated DeltaNet sizes, the gated attention and zero-centred norms, the MoE with
// its gated shared expert and mlp_only_layers.
TEST(ConfigFidelity, Qwen3NextBothSpellings) {
  auto v4 = parse_fixture("qwen3-next.v4.json");
  auto v5 = parse_fixture("qwen3-next.v5.json");
  ASSERT_TRUE(v4.is_ok()) << v4.status().to_string();
  ASSERT_TRUE(v5.is_ok()) << v5.status().to_string();
  EXPECT_TRUE(*v4 == *v5);
  const ModelSpec& s = *v5;
  EXPECT_EQ(s.family, "qwen3_next");
  ASSERT_TRUE(s.linear_attention && s.moe);
  EXPECT_EQ(s.linear_attention->n_key_heads, 2);
  EXPECT_EQ(s.linear_attention->n_value_heads, 4);
  EXPECT_EQ(s.linear_attention->key_head_dim, 16);
  EXPECT_EQ(s.linear_attention->value_head_dim, 16);
  EXPECT_EQ(s.linear_attention->conv_kernel, 4);
  EXPECT_EQ(s.linear_attention->conv_channels(), 2 * 2 * 16 + 4 * 16);
  for (int64_t l = 0; l < 4; ++l) {
    EXPECT_EQ(s.layers[static_cast<size_t>(l)].linear_attention, l != 3) << l;
    EXPECT_EQ(s.layers[static_cast<size_t>(l)].moe, l != 1) << l;
  }
  EXPECT_EQ(s.layers[1].dense_intermediate, 96);
  EXPECT_DOUBLE_EQ(s.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(s.rope_theta, 1e7);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_TRUE(s.attention_output_gate && s.zero_centered_norms && s.qk_norm && !s.qk_norm_full_width);
  EXPECT_EQ(s.moe->n_experts, 8);
  EXPECT_EQ(s.moe->experts_per_token, 2);
  EXPECT_EQ(s.moe->shared_intermediate, 64);
  EXPECT_TRUE(s.moe->shared_expert_gate && s.moe->norm_topk_prob);
  EXPECT_EQ(s.moe->scoring, RouterScoring::kSoftmax);
  // full_attention_interval 2: v4 saves it beside the layer_types it derives, v5 only layer_types.
  auto i4 = parse_fixture("qwen3-next-interval-2.v4.json");
  auto i5 = parse_fixture("qwen3-next-interval-2.v5.json");
  ASSERT_TRUE(i4.is_ok() && i5.is_ok()) << i4.status().to_string() << i5.status().to_string();
  EXPECT_TRUE(*i4 == *i5);
  for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(i5->layers[static_cast<size_t>(l)].linear_attention, l % 2 == 0);
  // The release's spelling: the interval alone (no layer_types) reads the same.
  nlohmann::json config = read_json(configs_dir() / "qwen3-next-interval-2.v4.json");
  config.erase("layer_types");
  auto interval_only = parse_model_config(config, "interval.json");
  ASSERT_TRUE(interval_only.is_ok()) << interval_only.status().to_string();
  EXPECT_TRUE(*interval_only == *i4);
  // Without either, transformers' default interval is 4.
  config.erase("full_attention_interval");
  auto fallback = parse_model_config(config, "default.json");
  ASSERT_TRUE(fallback.is_ok()) << fallback.status().to_string();
  EXPECT_TRUE(*fallback == s);
  // No experts: every layer a dense MLP.
  nlohmann::json dense = read_json(configs_dir() / "qwen3-next.v5.json");
  dense["num_experts"] = 0;
  auto no_experts = parse_model_config(dense, "dense.json");
  ASSERT_TRUE(no_experts.is_ok()) << no_experts.status().to_string();
  EXPECT_FALSE(no_experts->moe.has_value());
  for (const LayerSpec& l : no_experts->layers) EXPECT_EQ(l.dense_intermediate, 96);
}

// Qwen3-Next: a layer_types entry other than the two kinds, a list of the wrong length, an interval that
// disagrees with the layer_types saved beside it and value heads that do not group over the key heads
// are errors naming the key.
// OLMo-Hybrid's derived defaults: transformers 5 saves the layer kinds and linear sizes its class derives
// (every 4th layer attention; num_attention_heads key and value heads, d_k = int(0.75 hidden / n_k),
// d_v = 2 d_k), the v4 spelling leaves them null: Day0 derives the same.
TEST(ConfigFidelity, OlmoHybridDerivedDefaults) {
  auto v4 = parse_fixture("olmo-hybrid-derived.v4.json");
  auto v5 = parse_fixture("olmo-hybrid-derived.v5.json");
  ASSERT_TRUE(v4.is_ok() && v5.is_ok()) << v4.status().to_string() << v5.status().to_string();
  EXPECT_TRUE(*v4 == *v5);
  const LinearAttentionSpec& la = *v5->linear_attention;
  EXPECT_EQ(la.n_key_heads, 4);
  EXPECT_EQ(la.n_value_heads, 4);
  EXPECT_EQ(la.key_head_dim, 12);
  EXPECT_EQ(la.value_head_dim, 24);
  EXPECT_DOUBLE_EQ(la.beta_scale, 2.0);
  EXPECT_DOUBLE_EQ(la.norm_eps, 1e-5);
  for (int64_t l = 0; l < 8; ++l)
    EXPECT_EQ(v4->layers[static_cast<size_t>(l)].linear_attention, l % 4 != 3) << l;
  EXPECT_TRUE(v5->attention_post_norms && v5->qk_norm_full_width && v5->norm_gain_f32);
}

// Gemma 4: the release's global_head_dim / num_global_key_value_heads (v4 fixture) and transformers 5.25's
// per_layer_config (v5) read alike; the global KV heads count only with attention_k_eq_v; the last
// num_kv_shared_layers layers read the last earlier layer of their type, with a double-wide MLP.
TEST(ConfigFidelity, Gemma4LayerSizesAndSharedKv) {
  for (const char* tag : {"v4", "v5"}) {
    SCOPED_TRACE(tag);
    auto s = parse_fixture(std::string("gemma4.") + tag + ".json");
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    for (int64_t l = 0; l < 7; ++l) {
      const LayerSpec& layer = s->layers[static_cast<size_t>(l)];
      const bool full = l == 2 || l == 4 || l == 6;
      EXPECT_EQ(layer.mask, full ? AttentionMask::kCausal : AttentionMask::kSliding) << l;
      EXPECT_EQ(layer_head_dim(*s, layer), full ? 32 : 16) << l;
      EXPECT_EQ(layer_kv_heads(*s, layer), full ? 1 : 2) << l;
      EXPECT_EQ(layer.values_from_keys, full) << l;
      EXPECT_EQ(layer.kv_source, l == 5 ? 3 : l == 6 ? 4 : -1) << l;
      EXPECT_EQ(layer.dense_intermediate, l >= 5 ? 192 : 96) << l;
    }
    EXPECT_EQ(count_kv_layers(*s), 5);
    EXPECT_EQ(s->rope.type, RopeType::kProportional);
    EXPECT_DOUBLE_EQ(s->rope.proportional_share, 0.25);
    EXPECT_DOUBLE_EQ(s->partial_rotary_factor, 1.0);
    ASSERT_TRUE(s->sliding_rope.has_value());
    EXPECT_DOUBLE_EQ(s->sliding_rope->theta, 10000.0);
    ASSERT_TRUE(s->per_layer_input.has_value());
    EXPECT_EQ(s->per_layer_input->width, 8);
    EXPECT_DOUBLE_EQ(s->attention_scale, 1.0);
    auto wrapper = parse_fixture(std::string("gemma4-31b.") + tag + ".json");
    ASSERT_TRUE(wrapper.is_ok()) << wrapper.status().to_string();
    EXPECT_EQ(layer_head_dim(*wrapper, wrapper->layers[5]), 32);
    EXPECT_EQ(layer_kv_heads(*wrapper, wrapper->layers[5]), 2);  // k = v off: the global KV heads unread
    EXPECT_FALSE(wrapper->per_layer_input.has_value());
  }
  // Gemma4TextConfig's defaults: 30 layers, five sliding (512) to one full 512 wide, per-layer inputs of 256.
  auto bare = parse_model_config(
      nlohmann::json{{"architectures", {"Gemma4ForCausalLM"}}, {"model_type", "gemma4_text"}}, "bare.json");
  ASSERT_TRUE(bare.is_ok()) << bare.status().to_string();
  EXPECT_EQ(bare->n_layers, 30);
  EXPECT_EQ(bare->n_kv_heads, 4);
  EXPECT_TRUE(bare->tie_word_embeddings);
  EXPECT_EQ(bare->layers[4].mask, AttentionMask::kSliding);
  EXPECT_EQ(bare->layers[4].window, 512);
  EXPECT_EQ(layer_head_dim(*bare, bare->layers[5]), 512);
  EXPECT_EQ(layer_head_dim(*bare, bare->layers[4]), 256);
  ASSERT_TRUE(bare->per_layer_input.has_value());
  EXPECT_EQ(bare->per_layer_input->width, 256);
  // per_layer_config wins over global_head_dim in transformers: the two disagreeing is an error, and a
  // per-layer attribute Day0 does not apply is refused by name.
  nlohmann::json both = read_json(configs_dir() / "gemma4.v5.json");
  both["global_head_dim"] = 64;
  EXPECT_FALSE(parse_model_config(both, "both.json").is_ok());
  nlohmann::json other = read_json(configs_dir() / "gemma4.v5.json");
  other["per_layer_config"]["2"]["intermediate_size"] = 64;
  auto refused = parse_model_config(other, "other.json");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("intermediate_size"), std::string::npos);
}

// Gemma 4's MoE block (enable_moe_block, the 26B-A4B): every layer a MoE beside its dense MLP, the router
// with its own norm and scales, softmax top-k renormalized; its sizes required with it (no class default).
TEST(ConfigFidelity, Gemma4MoeBlock) {
  for (const char* tag : {"v4", "v5"}) {
    SCOPED_TRACE(tag);
    auto s = parse_fixture(std::string("gemma4-moe.") + tag + ".json");
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    ASSERT_TRUE(s->moe.has_value());
    EXPECT_EQ(s->moe->n_experts, 8);
    EXPECT_EQ(s->moe->experts_per_token, 3);
    EXPECT_EQ(s->moe->expert_intermediate, 32);
    EXPECT_EQ(s->moe->scoring, RouterScoring::kSoftmax);
    EXPECT_TRUE(s->moe->norm_topk_prob && s->moe->router_input_norm && s->moe->per_expert_scale);
    EXPECT_EQ(s->moe->n_shared_experts, 0);
    EXPECT_TRUE(s->dense_mlp_beside_moe && s->gelu_tanh_mlp && s->routing_weights_f32);
    EXPECT_FALSE(s->router_logits_f32);  // the logits are rounded, the softmax float32
    EXPECT_EQ(count_moe_layers(*s), 5);
    for (const LayerSpec& l : s->layers) EXPECT_EQ(l.dense_intermediate, 96);
    EXPECT_EQ(s->layers[4].kv_source, 2);
  }
  // Without the block the expert keys are not read (the 31B's config gives them null).
  auto dense = parse_fixture("gemma4.v5.json");
  ASSERT_TRUE(dense.is_ok()) << dense.status().to_string();
  EXPECT_FALSE(dense->moe.has_value());
  EXPECT_FALSE(dense->dense_mlp_beside_moe);
  const nlohmann::json base = read_json(configs_dir() / "gemma4-moe.v5.json");
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) {
    nlohmann::json missing = base;
    missing[key] = nullptr;
    auto refused = parse_model_config(missing, "missing.json");
    ASSERT_FALSE(refused.is_ok()) << key;
    EXPECT_NE(refused.status().message().find(key), std::string::npos) << refused.status().to_string();
  }
  nlohmann::json too_many = base;
  too_many["top_k_experts"] = 9;  // more picks than experts
  auto refused = parse_model_config(too_many, "too_many.json");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("top_k_experts"), std::string::npos);
}

TEST(ConfigAudit, Qwen3NextLayerKindsAndHeadGroups) {
  const std::pair<const char*, nlohmann::json> bad[] = {
      {"layer_types", {"linear_attention", "sliding_attention", "linear_attention", "full_attention"}},
      {"layer_types", {"linear_attention", "full_attention"}},
      {"full_attention_interval", 2},
      {"linear_num_value_heads", 3}};
  for (const auto& [key, value] : bad) {
    nlohmann::json c = read_json(configs_dir() / "qwen3-next.v4.json");
    c[key] = value;
    auto spec = parse_model_config(c, "kinds.json");
    ASSERT_FALSE(spec.is_ok()) << key << " " << value.dump();
    EXPECT_NE(spec.status().message().find(key), std::string::npos) << spec.status().to_string();
  }
}

// Two aliases of one setting that disagree are an error, not a silent pick.
TEST(ConfigAudit, DisagreeingAliasesAreAnError) {
  nlohmann::json config = read_json(configs_dir() / "qwen3-moe.v5.json");
  config["num_experts"] = 16;
  auto spec = parse_model_config(config, "both.json");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_NE(spec.status().message().find("num_experts"), std::string::npos) << spec.status().to_string();
}

// Kimi K2.5 (an image-text wrapper): the wrapper's tie_word_embeddings and quantization_config decide, as
// transformers applies them to the whole model; a text_config copy of the quantization that says something
// else, or a text model of another family, is refused; the release's placeholder keys are accounted for.
TEST(ConfigAudit, KimiK25WrapperKeysDecide) {
  const nlohmann::json base = read_json(configs_dir() / "kimi-k2.5.v5.json");
  nlohmann::json config = base;
  config["tie_word_embeddings"] = true;  // text_config still says false
  auto tied = parse_model_config(config, "k25.json");
  ASSERT_TRUE(tied.is_ok()) << tied.status().to_string();
  EXPECT_TRUE(tied->tie_word_embeddings);

  // As released: INT4 experts, the same quantization_config at the top and in text_config.
  const nlohmann::json quant = {
      {"quant_method", "compressed-tensors"},
      {"format", "pack-quantized"},
      {"quantization_status", "compressed"},
      {"kv_cache_scheme", nullptr},
      {"ignore",
       {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}},
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"weights",
           {{"num_bits", 4},
            {"group_size", 32},
            {"strategy", "group"},
            {"symmetric", true},
            {"type", "int"},
            {"dynamic", false},
            {"actorder", nullptr},
            {"block_structure", nullptr},
            {"observer", "minmax"},
            {"observer_kwargs", nlohmann::json::object()}}}}}}}};
  config = base;
  config["quantization_config"] = quant;
  config["text_config"]["quantization_config"] = quant;
  ConfigAudit audit;
  auto packed = parse_model_config(config, "k25.json", &audit);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  EXPECT_EQ(packed->weights.packed.bits, 4);
  EXPECT_TRUE(audit.unknown_keys.empty()) << unknown_keys_text(audit);

  config["text_config"]["quantization_config"]["ignore"] = {"lm_head"};
  auto differs = parse_model_config(config, "k25.json");
  ASSERT_FALSE(differs.is_ok());
  EXPECT_NE(differs.status().message().find("text_config.quantization_config"), std::string::npos);

  config = base;
  config["text_config"]["model_type"] = "qwen3";
  auto foreign = parse_model_config(config, "k25.json");
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(foreign.status().message().find("text_config.model_type"), std::string::npos);
}

}  // namespace
}  // namespace day0

namespace day0 {
namespace {

// An absent MLA size is the config class's default, as transformers reads it (an absent q_lora_rank is
// not "no query compression": only an explicit null is); the golden configs state every key, so each is
// read with its keys erased and compared with the class defaults of transformers 5.25.
TEST(ConfigFidelity, AbsentMlaKeysTakeTheClassDefaults) {
  struct Case {
    const char* golden;
    int64_t q_lora, kv_lora, nope, rope, v;
  };
  for (const Case& c :
       {Case{"deepseek-v3", 1536, 512, 128, 64, 128}, Case{"deepseek-v32", 1536, 512, 128, 64, 128},
        Case{"deepseek-v2-lite", 1536, 512, 128, 64, 128}, Case{"mistral4", 1024, 256, 64, 64, 128},
        Case{"glm-4.7-flash", 768, 512, 192, 64, 256}, Case{"glm-5", 2048, 512, 192, 64, 256}}) {
    SCOPED_TRACE(c.golden);
    std::ifstream in(std::filesystem::path(DAY0_TEST_DATA_DIR) / "golden" / c.golden / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    for (const char* k : {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                          "qk_head_dim", "head_dim", "index_head_dim"})
      j.erase(k);
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
      j["rope_scaling"].erase("partial_rotary_factor");
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
      j["rope_parameters"].erase("partial_rotary_factor");
    auto spec = parse_model_config(j, std::string(c.golden) + " without MLA sizes");
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    ASSERT_TRUE(spec->mla.has_value());
    EXPECT_EQ(spec->mla->q_lora_rank, c.q_lora);
    EXPECT_EQ(spec->mla->kv_lora_rank, c.kv_lora);
    EXPECT_EQ(spec->mla->qk_nope_head_dim, c.nope);
    EXPECT_EQ(spec->mla->qk_rope_head_dim, c.rope);
    EXPECT_EQ(spec->mla->v_head_dim, c.v);
    j["q_lora_rank"] = nullptr;  // explicit null: no query compression, where the family allows it
    auto none = parse_model_config(j, std::string(c.golden) + " with q_lora_rank null");
    if (none.is_ok()) {
      EXPECT_EQ(none->mla->q_lora_rank, 0);
    }
  }
}

}  // namespace
}  // namespace day0
