// DeepSeek-V4 (model/families/deepseek_v4.cpp): the config as transformers 5.25's DeepseekV4Config reads it
// (its defaults, the legacy keys the release ships, the writer's round trip), the weight
// table against the shapes of DeepseekV4ForCausalLM, the catalog entry's counts against the published
// 284B / 13B, KV bytes per layer kind, and the refusal of what the engine does not run yet.
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/model_memory.h"
#include "day0/model/model_summary.h"
#include "day0/model/param_count.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {
namespace {

nlohmann::json minimal_config() {
  return {{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}};
}

Result<ModelSpec> parse(const nlohmann::json& config, ConfigAudit* audit = nullptr) {
  return parse_model_config(config, "test config", audit);
}

const TensorSpec* find_tensor(const TensorManifest& m, const std::string& name) {
  for (const TensorSpec& t : m.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// An empty config is DeepseekV4Config's defaults (configuration_deepseek_v4.py): 43 layers, two heavily
// compressed layers then compressed sparse (odd) / heavily compressed (even), three hash-routed layers.
TEST(DeepseekV4Config, ClassDefaults) {
  auto spec = parse(minimal_config());
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->family, "deepseek_v4");
  EXPECT_EQ(spec->n_layers, 43);
  EXPECT_EQ(spec->hidden_size, 4096);
  EXPECT_EQ(spec->vocab_size, 129280);
  EXPECT_EQ(spec->n_heads, 64);
  EXPECT_EQ(spec->n_kv_heads, 1);
  EXPECT_EQ(spec->head_dim, 512);
  EXPECT_EQ(rotary_dims(spec->head_dim, spec->partial_rotary_factor), 64);
  EXPECT_EQ(spec->rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(spec->max_position_embeddings, 1048576);
  EXPECT_EQ(spec->sliding_window, 128);
  EXPECT_TRUE(spec->attention_sinks);
  EXPECT_EQ(spec->n_mtp_layers, 1);
  ASSERT_TRUE(spec->shared_kv_low_rank && spec->compressed_kv && spec->hyper_connections && spec->moe);
  EXPECT_EQ(spec->shared_kv_low_rank->q_lora_rank, 1024);
  EXPECT_EQ(spec->shared_kv_low_rank->out_groups, 8);
  EXPECT_EQ(spec->shared_kv_low_rank->out_rank, 1024);
  EXPECT_EQ(spec->compressed_kv->index_n_heads, 64);
  EXPECT_EQ(spec->compressed_kv->index_head_dim, 128);
  EXPECT_EQ(spec->compressed_kv->index_topk, 512);
  EXPECT_EQ(spec->compressed_kv->rope.theta, 160000.0);
  EXPECT_EQ(spec->compressed_kv->rope.scaling.type, RopeType::kDefault);
  EXPECT_EQ(spec->rope_theta, 10000.0);
  EXPECT_EQ(spec->hyper_connections->streams, 4);
  EXPECT_EQ(spec->hyper_connections->sinkhorn_iters, 20);
  EXPECT_EQ(spec->hyper_connections->eps, 1e-6);
  EXPECT_EQ(spec->moe->n_experts, 256);
  EXPECT_EQ(spec->moe->experts_per_token, 6);
  EXPECT_EQ(spec->moe->expert_intermediate, 2048);
  EXPECT_EQ(spec->moe->shared_intermediate, 2048);
  EXPECT_EQ(spec->moe->scoring, RouterScoring::kSqrtSoftplus);
  EXPECT_EQ(spec->moe->routed_scaling_factor, 1.5);
  EXPECT_EQ(spec->moe->swiglu_limit, 10.0);
  EXPECT_TRUE(spec->moe->swiglu_plain_clamp);
  EXPECT_TRUE(spec->moe->correction_bias);
  for (int64_t l = 0; l < spec->n_layers; ++l) {
    SCOPED_TRACE(l);
    const LayerSpec& layer = spec->layers[static_cast<size_t>(l)];
    const bool sparse = l >= 2 && l % 2 == 1;
    EXPECT_EQ(layer.compressed_sparse, sparse);
    EXPECT_EQ(layer.kv_compress_ratio, sparse ? 4 : 128);
    EXPECT_EQ(layer.hash_routed, l < 3);
    EXPECT_TRUE(layer.moe);
    EXPECT_EQ(layer.mask, AttentionMask::kSliding);
    EXPECT_EQ(layer.window, 128);
  }
}

// The release's legacy keys fold in as the class folds them: compress_ratios (cut to the layers; 0 is a
// sliding layer), compress_rate_hca, num_hash_layers, qk_rope_head_dim, rope_scaling on the compressed
// layers only (YaRN with attention factor 1).
TEST(DeepseekV4Config, LegacyKeysFoldIn) {
  nlohmann::json c = minimal_config();
  c["num_hidden_layers"] = 4;
  c["compress_ratios"] = {0, 4, 128, 4, 0};
  c["compress_rate_hca"] = 8;
  c["num_hash_layers"] = 1;
  c["head_dim"] = 256;
  c["qk_rope_head_dim"] = 32;
  c["compress_rope_theta"] = 50000;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536}};
  ConfigAudit audit;
  auto spec = parse(c, &audit);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_TRUE(audit.unknown_keys.empty()) << audit.unknown_keys.front();
  EXPECT_EQ(spec->layers[0].kv_compress_ratio, 0);
  EXPECT_TRUE(spec->layers[1].compressed_sparse);
  EXPECT_EQ(spec->layers[1].kv_compress_ratio, 4);
  EXPECT_FALSE(spec->layers[2].compressed_sparse);
  EXPECT_EQ(spec->layers[2].kv_compress_ratio, 8);
  EXPECT_TRUE(spec->layers[0].hash_routed);
  EXPECT_FALSE(spec->layers[1].hash_routed);
  EXPECT_EQ(spec->partial_rotary_factor, 0.125);
  EXPECT_EQ(spec->rope.type, RopeType::kDefault);  // the sliding layers' RoPE stays plain
  const LayerRope& compressed = spec->compressed_kv->rope;
  EXPECT_EQ(compressed.theta, 50000.0);
  EXPECT_EQ(compressed.scaling.type, RopeType::kYarn);
  EXPECT_EQ(compressed.scaling.factor, 16.0);
  ASSERT_TRUE(compressed.scaling.attention_factor.has_value());
  EXPECT_EQ(*compressed.scaling.attention_factor, 1.0);
}

// What transformers (and so the engine later) would misread is refused, naming the key.
TEST(DeepseekV4Config, RefusesWhatItDoesNotImplement) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"compress_ratios", {0, 8}}, {"num_hidden_layers", 2}}, "compress_ratios[1]"},
      {{{"layer_types", {"sliding_attention"}}, {"num_hidden_layers", 2}}, "layer_types"},
      {{{"layer_types", {"sliding_attention", "full_attention"}}, {"num_hidden_layers", 2}},
       "layer_types[1]"},
      {{{"mlp_layer_types", {"moe", "dense"}}, {"num_hidden_layers", 2}}, "mlp_layer_types[1]"},
      {{{"topk_method", "greedy"}}, "topk_method"},
      {{{"norm_topk_prob", false}}, "norm_topk_prob"},
      {{{"n_shared_experts", 2}}, "n_shared_experts"},
      {{{"num_key_value_heads", 2}}, "num_key_value_heads"},
      {{{"scoring_func", "softmax"}}, "scoring_func"},
      {{{"qk_rope_head_dim", 32}, {"partial_rotary_factor", 0.125}}, "qk_rope_head_dim"},
      {{{"o_groups", 3}}, "o_groups"},
  };
  for (const auto& [overrides, key] : cases) {
    SCOPED_TRACE(overrides.dump());
    nlohmann::json c = minimal_config();
    c.update(overrides);
    auto spec = parse(c);
    ASSERT_FALSE(spec.is_ok());
    EXPECT_NE(spec.status().message().find(key), std::string::npos) << spec.status().to_string();
  }
}

// The writer is the parser's inverse (synth's miniatures depend on it): the Flash entry and the legacy
// config above, written in transformers 5's spelling, read back to the same spec.
TEST(DeepseekV4Config, WriterRoundTrips) {
  auto flash = catalog_model("deepseek-v4-flash");
  nlohmann::json legacy = minimal_config();
  legacy.update({{"num_hidden_layers", 4},
                 {"compress_ratios", {0, 4, 128, 4}},
                 {"compress_rate_hca", 8},
                 {"num_hash_layers", 1},
                 {"scoring_func", "sigmoid"}});
  auto other = parse(legacy);
  ASSERT_TRUE(flash.is_ok() && other.is_ok());
  for (const ModelSpec* spec : {&*flash, &*other}) {
    ConfigAudit audit;
    auto again = parse(to_hf_config(*spec), &audit);
    ASSERT_TRUE(again.is_ok()) << again.status().to_string();
    EXPECT_TRUE(*again == *spec) << to_hf_config(*spec).dump();
    EXPECT_TRUE(audit.unknown_keys.empty()) << audit.unknown_keys.front();
  }
}

// The weight table against DeepseekV4ForCausalLM's parameters (shapes as its modules build them, names as
// its save writes them) on the Flash config: attention, a compressor of each kind, the indexer, the hash
// and the learned routers, the hyper-connections and the MTP layer under the release's names.
TEST(DeepseekV4Weights, FlashShapes) {
  auto spec = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto m = build_tensor_manifest(*spec);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"model.embed_tokens.weight", {129280, 4096}},
      {"head.weight", {129280, 4096}},
      {"model.hc_head.hc_fn", {4, 16384}},
      {"model.layers.0.attn.attn_sink", {64}},
      {"model.layers.0.attn.wq_a.weight", {1024, 4096}},
      {"model.layers.0.attn.wq_b.weight", {32768, 1024}},
      {"model.layers.0.attn.wkv.weight", {512, 4096}},
      {"model.layers.0.attn.norm.weight", {512}},
      {"model.layers.0.attn.wo_a.weight", {8192, 4096}},
      {"model.layers.0.attn.wo_b.weight", {4096, 8192}},
      {"model.layers.0.ffn.gate.tid2eid", {129280, 6}},
      {"model.layers.0.ffn.experts.255.w2.weight", {4096, 1024}},  // FP4: two codes a byte
      {"model.layers.0.ffn.shared_experts.w1.weight", {2048, 4096}},
      {"model.layers.0.hc_attn_fn", {24, 16384}},
      {"model.layers.0.hc_ffn_scale", {3}},
      {"model.layers.2.attn.compressor.ape", {4, 1024}},
      {"model.layers.2.attn.compressor.wkv.weight", {1024, 4096}},
      {"model.layers.2.attn.indexer.compressor.ape", {4, 256}},
      {"model.layers.2.attn.indexer.compressor.norm.weight", {128}},
      {"model.layers.2.attn.indexer.wq_b.weight", {8192, 1024}},
      {"model.layers.2.attn.indexer.weights_proj.weight", {64, 4096}},
      {"model.layers.3.attn.compressor.ape", {128, 512}},
      {"model.layers.3.attn.compressor.wgate.weight", {512, 4096}},
      {"model.layers.3.ffn.gate.bias", {256}},
      {"mtp.0.e_proj.weight", {4096, 4096}},
      {"mtp.0.hnorm.weight", {4096}},
      {"mtp.0.hc_head_fn", {4, 16384}},
      {"mtp.0.attn.wq_b.weight", {32768, 1024}},
  };
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    const TensorSpec* t = find_tensor(*m, name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, shape);
    EXPECT_EQ(t->mtp, name.starts_with("mtp."));
  }
  // Layer 0 is hash-routed (no correction bias), layer 3 learned (no table); sliding layers have no
  // compressor, heavily compressed ones no indexer; the MTP layer is a sliding one.
  for (const char* absent : {"model.layers.0.ffn.gate.bias", "model.layers.3.ffn.gate.tid2eid",
                             "model.layers.0.attn.compressor.ape", "model.layers.3.attn.indexer.wq_b.weight",
                             "mtp.0.attn.compressor.ape", "mtp.0.ffn.gate.tid2eid"}) {
    EXPECT_EQ(find_tensor(*m, absent), nullptr) << absent;
  }
  // Shard rules: heads split under TP (queries, sinks, the output groups), the one K=V head and the
  // compressors replicated, experts whole per EP rank, the head by vocabulary.
  EXPECT_EQ(find_tensor(*m, "model.layers.0.attn.wq_b.weight")->shard.rule, ShardRule::kColumn);
  EXPECT_EQ(find_tensor(*m, "model.layers.0.attn.attn_sink")->shard.rule, ShardRule::kColumn);
  EXPECT_EQ(find_tensor(*m, "model.layers.0.attn.wo_a.weight")->shard.rule, ShardRule::kColumn);
  EXPECT_EQ(find_tensor(*m, "model.layers.0.attn.wo_b.weight")->shard.rule, ShardRule::kRow);
  EXPECT_EQ(find_tensor(*m, "model.layers.0.attn.wkv.weight")->shard.rule, ShardRule::kReplicated);
  EXPECT_EQ(find_tensor(*m, "model.layers.2.attn.compressor.wkv.weight")->shard.rule, ShardRule::kReplicated);
  EXPECT_EQ(find_tensor(*m, "model.layers.0.ffn.experts.7.w1.weight")->shard.rule, ShardRule::kExpert);
  EXPECT_EQ(find_tensor(*m, "head.weight")->shard.rule, ShardRule::kVocab);
  // The release's names: no "model." prefix, the key norm as kv_norm.
  ASSERT_FALSE(m->stored_layouts.empty());
  const StoredLayout& release = m->stored_layouts.front();
  EXPECT_EQ(renamed_for_layout(release, "model.embed_tokens.weight"), "embed.weight");
  EXPECT_EQ(renamed_for_layout(release, "model.layers.7.attn.norm.weight"), "layers.7.attn.kv_norm.weight");
  EXPECT_EQ(renamed_for_layout(release, "model.layers.7.attn.compressor.norm.weight"),
            "layers.7.attn.compressor.norm.weight");
  EXPECT_EQ(renamed_for_layout(release, "model.hc_head.hc_fn"), "hc_head_fn");
  EXPECT_EQ(renamed_for_layout(release, "mtp.0.attn.norm.weight"), "mtp.0.attn.kv_norm.weight");
  // Block scales as the release's safetensors headers list them: `layers.0.attn.wq_a.scale` beside
  // `layers.0.attn.wq_a.weight`, the experts' likewise.
  EXPECT_EQ(renamed_for_layout(release, "model.layers.0.attn.wq_a.weight_scale_inv"),
            "layers.0.attn.wq_a.scale");
  EXPECT_EQ(renamed_for_layout(release, "model.layers.0.ffn.experts.7.w1.weight_scale_inv"),
            "layers.0.ffn.experts.7.w1.scale");
  EXPECT_EQ(renamed_for_layout(release, "model.layers.0.hc_attn_scale"), "layers.0.hc_attn_scale");
}

// The release stores its 128x128 FP8 block scales as F8_E8M0 exponent bytes (`layers.0.attn.wq_a.scale
// F8_E8M0 [8, 32]`): the release layout says so where the config's scale_fmt is ue8m0, keeping the
// table's float32 accepted; without ue8m0 the scales stay float32.
TEST(DeepseekV4Weights, ReleaseLayoutStoresUe8m0BlockScalesAsExponentBytes) {
  auto flash = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(flash.is_ok()) << flash.status().to_string();
  ASSERT_TRUE(flash->weights.ue8m0_scales);
  for (const bool ue8m0 : {true, false}) {
    SCOPED_TRACE(ue8m0);
    ModelSpec spec = *flash;
    spec.weights.ue8m0_scales = ue8m0;
    auto table = build_tensor_manifest(spec);
    ASSERT_TRUE(table.is_ok()) << table.status().to_string();
    const StoredLayout* layout = release_layout(*table);
    ASSERT_NE(layout, nullptr);
    const TensorManifest stored = to_stored_layout(*table, *layout);
    const TensorSpec* scale = find_tensor(stored, "layers.0.attn.wq_a.scale");
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(scale->shape, (std::vector<int64_t>{8, 32}));
    EXPECT_EQ(scale->dtype, ue8m0 ? DType::kF8E8M0 : DType::kF32);
    EXPECT_EQ(scale->bytes, ue8m0 ? 256u : 1024u);
    EXPECT_TRUE(scale->accepts(DType::kF32));
    EXPECT_EQ(scale->accepts(DType::kF8E8M0), ue8m0);
    // The FP4 experts' scales are exponent bytes either way; hc_attn_scale is no block scale.
    EXPECT_EQ(find_tensor(stored, "layers.0.ffn.experts.0.w1.scale")->dtype, DType::kF8E8M0);
    EXPECT_EQ(find_tensor(stored, "layers.0.hc_attn_scale")->dtype, DType::kF32);
    // The table under transformers' names keeps the float32 it reads.
    EXPECT_EQ(find_tensor(*table, "model.layers.0.attn.wq_a.weight_scale_inv")->dtype, DType::kF32);
  }
}

// What inspect and adapt's structure stage say of the attention: V4's own mechanisms (one shared key =
// value head, low-rank queries, the grouped output, each layer kind with its count), never "GQA". The
// counts and ratios are recounted from the layer list: on the catalog's Flash (compress_ratios 0, 0, then
// 4 / 128 alternating) and on the golden miniature (window only, sparse, heavily compressed, sparse).
TEST(DeepseekV4Summary, AttentionIsDescribedByItsMechanisms) {
  auto flash = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(flash.is_ok()) << flash.status().to_string();
  auto golden = load_model_config(std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4/config.json");
  ASSERT_TRUE(golden.is_ok()) << golden.status().to_string();
  for (const ModelSpec* s : {&*flash, &*golden}) {
    SCOPED_TRACE(s->n_layers);
    const std::string text = describe_attention(*s);
    int64_t window_only = 0, sparse = 0, heavy = 0, sparse_ratio = 0, heavy_ratio = 0;
    for (const LayerSpec& l : s->layers) {
      if (l.kv_compress_ratio == 0) {
        ++window_only;
      } else {
        ++(l.compressed_sparse ? sparse : heavy);
        (l.compressed_sparse ? sparse_ratio : heavy_ratio) = l.kv_compress_ratio;
      }
    }
    const SharedKvLowRankAttentionSpec& a = *s->shared_kv_low_rank;
    for (const std::string& part :
         {fmt::format("one shared key = value head x {}", s->head_dim),
          fmt::format("{} query heads from a rank-{} latent", s->n_heads, a.q_lora_rank),
          fmt::format("output in {} groups of rank {}", a.out_groups, a.out_rank), std::string("sinks"),
          fmt::format("every layer a window of {} raw keys: {} window only", s->sliding_window, window_only),
          fmt::format("{} compressed sparse (1 entry / {} tokens, top {} by a {} x {} indexer)", sparse,
                      sparse_ratio, s->compressed_kv->index_topk, s->compressed_kv->index_n_heads,
                      s->compressed_kv->index_head_dim),
          fmt::format("{} heavily compressed (1 entry / {} tokens)", heavy, heavy_ratio)}) {
      EXPECT_NE(text.find(part), std::string::npos) << part << " in " << text;
    }
    EXPECT_EQ(text.find("GQA"), std::string::npos) << text;
  }
  const std::string text = describe_attention(*flash);
  EXPECT_NE(text.find("2 window only, 21 compressed sparse"), std::string::npos) << text;
  EXPECT_NE(text.find("20 heavily compressed (1 entry / 128 tokens)"), std::string::npos) << text;
  EXPECT_NE(text.find("output in 8 groups of rank 1024"), std::string::npos) << text;
}

// DeepSeek's model card (huggingface.co/deepseek-ai/DeepSeek-V4-Flash): 284B total, 13B activated. Our
// count of the release config: total within 0.5% of 284B. The 13B is two significant figures: ours with
// the input embedding left out (as the head is read per token and the embedding row is a gather) is within
// half its last digit, and the MTP layer is counted apart.
TEST(DeepseekV4Counts, FlashMatchesThePublishedFigures) {
  auto spec = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto c = count_params(*spec);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_LE(std::fabs(static_cast<double>(c->total) - 284e9), 0.005 * 284e9) << c->total;
  EXPECT_LE(std::fabs(static_cast<double>(c->active_without_embedding) - 13e9), 0.5e9)
      << c->active_without_embedding;
  // Routed experts: 43 layers x 256 experts x 3 x 2048 x 4096; a token uses 6 of each layer's.
  EXPECT_EQ(c->routed_experts, int64_t{43} * 256 * 3 * 2048 * 4096);
  EXPECT_EQ(c->routed_experts_active, int64_t{43} * 6 * 3 * 2048 * 4096);
  // Hyper-connections: per layer two mixers of fn [24, 16384] + base [24] + scale [3]; the head's [4, 16384]
  // + [4] + [1].
  EXPECT_EQ(c->hyper_connections, int64_t{43} * 2 * (24 * 16384 + 24 + 3) + (4 * 16384 + 4 + 1));
  // The MTP layer: a sliding layer's attention and MoE (all 256 experts), e_proj / h_proj, norms, its head.
  EXPECT_GT(c->mtp, int64_t{256} * 3 * 2048 * 4096);
  EXPECT_LT(c->mtp, c->total / 40);
}

// KV bytes per token per layer kind (BF16): the raw rows are one K=V head of 512 (1,024 B) held for the
// window of 128; a compressed sparse layer adds (512 + 128) x 2 B per 4 tokens, a heavily compressed one
// 512 x 2 B per 128 tokens, never evicted.
TEST(DeepseekV4Kv, BytesPerLayerKind) {
  auto spec = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(kv_bytes_per_token_per_layer(*spec, KvDtype::kBF16), uint64_t{1024});
  const LayerSpec& sparse = spec->layers[2];
  const LayerSpec& heavy = spec->layers[3];
  const LayerSpec& sliding = spec->layers[0];
  EXPECT_EQ(compressed_kv_bytes_per_token(*spec, sparse, KvDtype::kBF16), 320.0);
  EXPECT_EQ(compressed_kv_bytes_per_token(*spec, heavy, KvDtype::kBF16), 8.0);
  EXPECT_EQ(compressed_kv_bytes_per_token(*spec, sliding, KvDtype::kBF16), 0.0);
  // 21 sparse, 20 heavy, 2 sliding layers: a 1,000-token sequence holds 128 raw rows a layer, 250 sparse and
  // 7 heavy entries.
  const uint64_t expected = 43 * 128 * 1024 + 21 * 250 * uint64_t{1280} + 20 * 7 * uint64_t{1024};
  EXPECT_EQ(kv_cache_bytes(*spec, 1000, KvDtype::kBF16), expected);
  const KvCacheSummary s = kv_cache_summary(*spec, KvDtype::kBF16);
  ASSERT_EQ(s.kinds.size(), 3u);
  int64_t layers = 0;
  for (const KvLayerKind& k : s.kinds) layers += k.layers;
  EXPECT_EQ(layers, 43);
  EXPECT_DOUBLE_EQ(s.bytes_per_token_past_windows, 21 * 320.0 + 20 * 8.0);
}

// DeepSeek's model card (huggingface.co/deepseek-ai/DeepSeek-V4-Pro): 1.6T total, 49B activated, both two
// significant figures, so each holds to half its last digit (0.5% of 1.6T would ask for a third digit the
// card does not give). Conventions as Flash's: the MTP layer counted apart, the active count without the
// input embedding.
TEST(DeepseekV4Counts, ProMatchesThePublishedFigures) {
  auto spec = catalog_model("deepseek-v4-pro");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto c = count_params(*spec);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_LE(std::fabs(static_cast<double>(c->total) - 1.6e12), 0.05e12) << c->total;
  EXPECT_LE(std::fabs(static_cast<double>(c->active_without_embedding) - 49e9), 0.5e9)
      << c->active_without_embedding;
  // Routed experts: 61 layers x 384 experts x 3 x 3072 x 7168; a token uses 6 of each layer's.
  EXPECT_EQ(c->routed_experts, int64_t{61} * 384 * 3 * 3072 * 7168);
  EXPECT_EQ(c->routed_experts_active, int64_t{61} * 6 * 3 * 3072 * 7168);
  // Hyper-connections over 4 streams of 7168: per layer two mixers of fn [24, 28672] + base [24] + scale [3],
  // the head's [4, 28672] + [4] + [1].
  EXPECT_EQ(c->hyper_connections, int64_t{61} * 2 * (24 * 28672 + 24 + 3) + (4 * 28672 + 4 + 1));
}

// The release's bytes (quantization_config FP8 e4m3 in 128x128 blocks, expert_dtype "fp4" beside it): a
// routed expert matrix [out, in] is I8 [out, in / 2] (two e2m1 codes a byte) with E8M0 scales [out, in / 32];
// the attention's projections FP8 with one E8M0 scale per 128x128 block.
TEST(DeepseekV4Weights, ProReleaseBytesFp4ExpertsFp8Rest) {
  auto spec = catalog_model("deepseek-v4-pro");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->weights.format, WeightFormat::kFp8Block);
  EXPECT_EQ(spec->weights.block_rows, 128);
  EXPECT_EQ(spec->weights.fp4_expert_group, 32);
  auto m = build_tensor_manifest(*spec);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  uint64_t expert_bytes = 0;
  for (const TensorSpec& t : m->tensors) {
    if (!t.mtp && t.expert >= 0) expert_bytes += t.bytes;
  }
  const uint64_t expert_params = uint64_t{61} * 384 * 3 * 3072 * 7168;
  EXPECT_EQ(expert_bytes, expert_params / 2 + expert_params / 32);
  const TensorSpec* wq_b = find_tensor(*m, "model.layers.0.attn.wq_b.weight");
  ASSERT_NE(wq_b, nullptr);
  EXPECT_EQ(wq_b->dtype, DType::kF8E4M3);
  EXPECT_EQ(wq_b->bytes, uint64_t{65536} * 1536);
  const TensorSpec* w1 = find_tensor(*m, "model.layers.5.ffn.experts.383.w1.weight");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{3072, 7168 / 2}));
  EXPECT_EQ(w1->params, int64_t{3072} * 7168);
}

// KV bytes per token per layer kind, from the config's numbers: one K=V head of head_dim 512 in BF16 per
// raw row; a compressed sparse layer (ratio 4) adds its entry and its indexer key (512 + index_head_dim 128)
// per 4 tokens, a heavily compressed one (ratio 128) one entry per 128 tokens. compress_ratios gives 31
// heavily compressed layers (0, 1 and the odd ones from 3) and 30 compressed sparse (the even ones from 2).
TEST(DeepseekV4Kv, ProBytesPerLayerKind) {
  auto spec = catalog_model("deepseek-v4-pro");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  const double head_dim = 512, index_head_dim = 128, bf16 = 2;
  const double raw = head_dim * bf16;
  const double sparse = (head_dim + index_head_dim) * bf16 / 4;
  const double heavy = head_dim * bf16 / 128;
  EXPECT_EQ(kv_bytes_per_token_per_layer(*spec, KvDtype::kBF16), static_cast<uint64_t>(raw));
  const KvCacheSummary s = kv_cache_summary(*spec, KvDtype::kBF16);
  ASSERT_EQ(s.kinds.size(), 2u);
  for (const KvLayerKind& k : s.kinds) {
    SCOPED_TRACE(k.name);
    EXPECT_EQ(k.window, 128);
    EXPECT_EQ(k.raw_bytes_per_token, raw);
    if (k.compress_ratio == 4) {
      EXPECT_EQ(k.layers, 30);
      EXPECT_EQ(k.compressed_bytes_per_token, sparse);
    } else {
      EXPECT_EQ(k.compress_ratio, 128);
      EXPECT_EQ(k.layers, 31);
      EXPECT_EQ(k.compressed_bytes_per_token, heavy);
    }
  }
  EXPECT_DOUBLE_EQ(s.bytes_per_token_past_windows, 30 * sparse + 31 * heavy);
}

// Every mechanism of the family has its block: the released config is not refused by name.
TEST(DeepseekV4Runs, EveryMechanismHasItsBlock) {
  auto spec = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_TRUE(unimplemented_mechanisms(*spec).empty());
  const Status s = check_engine_runs(*spec);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

}  // namespace
}  // namespace day0
