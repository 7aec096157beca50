// Miniatures of every catalog model: same structure, small, deterministic, sane values, and a
// synth -> verify round trip that passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/checkpoint_verify.h"
#include "day0/io/dequant.h"
#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/synth/synth_checkpoint.h"
#include "day0/synth/weight_init.h"
#include "io_fixtures.h"

namespace day0 {
namespace {

using testing::read_file;
using testing::TempDir;

bool has_mask(const ModelSpec& s, AttentionMask mask) {
  return count_masked_layers(s, mask) > 0;
}

void expect_same_structure(const ModelSpec& full, const ModelSpec& mini, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(mini.family, full.family);
  EXPECT_EQ(mini.architecture, full.architecture);
  EXPECT_EQ(mini.attention, full.attention);
  EXPECT_EQ(mini.mla.has_value(), full.mla.has_value());
  if (full.mla) {
    EXPECT_EQ(mini.mla->q_lora_rank > 0, full.mla->q_lora_rank > 0);
  }
  EXPECT_EQ(mini.qk_norm, full.qk_norm);
  EXPECT_EQ(mini.attention_sinks, full.attention_sinks);
  EXPECT_EQ(mini.qkv_bias, full.qkv_bias);
  EXPECT_EQ(mini.o_bias, full.o_bias);
  EXPECT_EQ(mini.tie_word_embeddings, full.tie_word_embeddings);
  EXPECT_EQ(mini.rope, full.rope);
  EXPECT_EQ(mini.rope_layout, full.rope_layout);
  EXPECT_EQ(mini.partial_rotary_factor, full.partial_rotary_factor);
  EXPECT_EQ(mini.weights, full.weights);
  EXPECT_EQ(mini.n_mtp_layers, full.n_mtp_layers);
  EXPECT_EQ(mini.n_kv_heads == mini.n_heads, full.n_kv_heads == full.n_heads);
  EXPECT_EQ(has_mask(mini, AttentionMask::kSliding), has_mask(full, AttentionMask::kSliding));
  EXPECT_EQ(has_mask(mini, AttentionMask::kChunked), has_mask(full, AttentionMask::kChunked));
  EXPECT_EQ(mini.layers[0].moe, full.layers[0].moe);  // dense-then-MoE layout kept
  EXPECT_EQ(count_moe_layers(mini) > 0, count_moe_layers(full) > 0);
  EXPECT_EQ(count_moe_layers(mini) < mini.n_layers, count_moe_layers(full) < full.n_layers);
  ASSERT_EQ(mini.moe.has_value(), full.moe.has_value());
  if (full.moe) {
    EXPECT_EQ(mini.moe->scoring, full.moe->scoring);
    EXPECT_EQ(mini.moe->topk_method, full.moe->topk_method);
    EXPECT_EQ(mini.moe->correction_bias, full.moe->correction_bias);
    EXPECT_EQ(mini.moe->norm_topk_prob, full.moe->norm_topk_prob);
    EXPECT_EQ(mini.moe->routed_scaling_factor, full.moe->routed_scaling_factor);
    EXPECT_EQ(mini.moe->n_shared_experts, full.moe->n_shared_experts);
    EXPECT_EQ(mini.moe->shared_intermediate > 0, full.moe->shared_intermediate > 0);
    EXPECT_EQ(mini.moe->shared_expert_gate, full.moe->shared_expert_gate);
    EXPECT_EQ(mini.moe->router_bias, full.moe->router_bias);
    EXPECT_EQ(mini.moe->expert_bias, full.moe->expert_bias);
    EXPECT_EQ(mini.moe->swiglu_limit, full.moe->swiglu_limit);
    EXPECT_EQ(mini.moe->n_group > 1, full.moe->n_group > 1);
    EXPECT_LE(mini.moe->experts_per_token, mini.moe->topk_group * (mini.moe->n_experts / mini.moe->n_group));
  }
  EXPECT_EQ(mini.shared_kv_low_rank.has_value(), full.shared_kv_low_rank.has_value());
  EXPECT_EQ(mini.compressed_kv.has_value(), full.compressed_kv.has_value());
  EXPECT_EQ(mini.hyper_connections, full.hyper_connections);
  const auto count = [](const ModelSpec& s, auto predicate) {
    return std::count_if(s.layers.begin(), s.layers.end(), predicate);
  };
  const auto hashed = [](const LayerSpec& l) { return l.hash_routed; };
  EXPECT_EQ(count(mini, hashed) > 0, count(full, hashed) > 0);
}

// DeepSeek-V4-Flash's miniature keeps every attention layer kind (sliding only, compressed sparse, heavily
// compressed: the release's first four layers), hash-routed and learned-routed MoE layers and the
// hyper-connections; its o_groups still split over two ranks, and a heavily compressed window completes
// within a short prompt.
TEST(Synth, DeepseekV4MiniatureKeepsEveryLayerKind) {
  auto full = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  auto mini = make_miniature_spec(*full, {});
  ASSERT_TRUE(mini.is_ok()) << mini.status().to_string();
  int sliding = 0, sparse = 0, heavy = 0, hashed = 0;
  for (const LayerSpec& l : mini->layers) {
    sliding += l.kv_compress_ratio == 0;
    sparse += l.kv_compress_ratio > 0 && l.compressed_sparse;
    heavy += l.kv_compress_ratio > 0 && !l.compressed_sparse;
    hashed += l.hash_routed;
    if (l.kv_compress_ratio > 0) {
      EXPECT_LE(l.kv_compress_ratio, 8);
    }
  }
  EXPECT_GT(sliding, 0);
  EXPECT_GT(sparse, 0);
  EXPECT_GT(heavy, 0);
  EXPECT_GT(hashed, 0);
  EXPECT_LT(hashed, mini->n_layers);
  EXPECT_EQ(mini->n_kv_heads, 1);
  EXPECT_EQ(mini->shared_kv_low_rank->out_groups, 2);
  EXPECT_EQ(mini->n_heads % mini->shared_kv_low_rank->out_groups, 0);
  EXPECT_LT(mini->compressed_kv->index_topk, 4);  // a 16-token prompt's 4 entries get a real choice
  EXPECT_EQ(mini->hyper_connections, full->hyper_connections);
}

// In the release's format (DeepSeek-V4-Pro's catalog entry carries its quantization_config): FP8 e4m3
// attention and shared experts in 128x128 blocks, FP4 e2m1 routed experts with a ue8m0 byte per 32
// columns, under the release's own tensor names; each hash layer's token table gives every token distinct
// experts.
TEST(Synth, DeepseekV4MiniatureIsWrittenInTheReleaseFormatAndNames) {
  auto full = catalog_model("deepseek-v4-pro");
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  ASSERT_EQ(full->weights.format, WeightFormat::kFp8Block);
  ASSERT_EQ(full->weights.fp4_expert_group, 32);
  TempDir dir;
  SynthOptions options;
  options.seed = 4;
  auto result = synthesize_miniature(*full, {}, options, dir.file("m"));
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result->spec.weights, full->weights);
  auto ckpt = Checkpoint::open(dir.file("m"));
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  const auto dtype_of = [&](const std::string& name) {
    auto t = ckpt->tensor(name);
    EXPECT_TRUE(t.is_ok()) << name;
    return t.is_ok() ? t->dtype : DType::kF32;
  };
  EXPECT_EQ(dtype_of("layers.0.attn.wq_a.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.0.attn.wo_a.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.0.ffn.shared_experts.w1.weight"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of("layers.0.ffn.experts.0.w1.weight"), DType::kI8);
  // Block scales under the release's names, `<module>.scale` beside `<module>.weight`.
  EXPECT_EQ(dtype_of("layers.0.ffn.experts.0.w1.scale"), DType::kF8E8M0);
  EXPECT_TRUE(ckpt->tensor("layers.0.attn.wq_a.scale").is_ok());
  EXPECT_FALSE(ckpt->tensor("layers.0.attn.wq_a.weight_scale_inv").is_ok());
  EXPECT_TRUE(ckpt->tensor("layers.0.attn.kv_norm.weight").is_ok());  // the release name of attn.norm
  EXPECT_TRUE(ckpt->tensor("embed.weight").is_ok());
  EXPECT_TRUE(ckpt->tensor("hc_head_fn").is_ok());
  EXPECT_FALSE(ckpt->tensor("model.embed_tokens.weight").is_ok());
  const int64_t experts = result->spec.moe->n_experts, k = result->spec.moe->experts_per_token;
  const TensorView table = *ckpt->tensor("layers.0.ffn.gate.tid2eid");  // [vocab, k] I64
  ASSERT_EQ(table.dtype, DType::kI64);
  ASSERT_EQ(std::vector<int64_t>(table.shape.begin(), table.shape.end()),
            (std::vector<int64_t>{result->spec.vocab_size, k}));
  std::vector<int64_t> ids(static_cast<size_t>(result->spec.vocab_size * k));
  std::memcpy(ids.data(), table.data.data(), ids.size() * sizeof(int64_t));
  std::vector<int> used(static_cast<size_t>(experts), 0);
  for (int64_t v = 0; v < result->spec.vocab_size; ++v) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[static_cast<size_t>(v * k + j)];
      ASSERT_TRUE(e >= 0 && e < experts) << "token " << v;
      ++used[static_cast<size_t>(e)];
      for (int64_t i = 0; i < j; ++i) ASSERT_NE(ids[static_cast<size_t>(v * k + i)], e) << "token " << v;
    }
  }
  for (int64_t e = 0; e < experts; ++e) EXPECT_GT(used[static_cast<size_t>(e)], 0) << "expert " << e;
}

// DeepSeek-V4's release stores its 128x128 FP8 block scales as F8_E8M0 exponent bytes (its safetensors
// headers: `layers.0.attn.wq_a.scale F8_E8M0 [8, 32]` beside `layers.0.attn.wq_a.weight F8_E4M3
// [1024, 4096]`); the Flash entry's quantization_config says ue8m0. The miniature is written the same way:
// every FP8 weight's `.scale` is E8M0 of its block grid, and the weights dequantize through those bytes to
// the seed's normal draw within E4M3's rounding (power-of-two scales lose nothing more).
TEST(Synth, DeepseekV4FlashBlockScalesAreExponentBytes) {
  auto full = catalog_model("deepseek-v4-flash");
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  ASSERT_EQ(full->weights.format, WeightFormat::kFp8Block);
  ASSERT_TRUE(full->weights.ue8m0_scales);
  TempDir dir;
  SynthOptions options;
  options.seed = 6;
  auto result = synthesize_miniature(*full, {}, options, dir.file("m"));
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  auto ckpt = Checkpoint::open(dir.file("m"));
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  int checked = 0;
  for (const auto& name : ckpt->tensor_names()) {
    const TensorView w = *ckpt->tensor(name);
    if (w.dtype != DType::kF8E4M3) continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(name.ends_with(".weight"));
    auto scale = ckpt->tensor(name.substr(0, name.size() - 7) + ".scale");
    ASSERT_TRUE(scale.is_ok());
    EXPECT_EQ(scale->dtype, DType::kF8E8M0);
    ASSERT_EQ(w.shape.size(), 2u);
    EXPECT_EQ(std::vector<int64_t>(scale->shape.begin(), scale->shape.end()),
              (std::vector<int64_t>{(w.shape[0] + 127) / 128, (w.shape[1] + 127) / 128}));
    auto values = dequant_fp8_block(w, *scale);
    ASSERT_TRUE(values.is_ok()) << values.status().to_string();
    const auto ref = normal_values(6, name, values->size(), options.init_std);
    for (size_t i = 0; i < values->size(); ++i) {
      ASSERT_NEAR((*values)[i], ref[i], std::fabs(ref[i]) / 15.0f + 1e-4f) << i;
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);  // wq_a, wq_b, wkv, wo_a, wo_b, the shared expert's, ...
}

TEST(Synth, EveryCatalogModelRoundTripsThroughVerify) {
  for (const auto& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    auto full = catalog_model(entry.name);
    ASSERT_TRUE(full.is_ok()) << full.status().to_string();
    TempDir dir;
    if (full->weights.packed.bits != 0) {
      // Kimi K2.5's INT4 experts: synth refuses a pack-quantized spec (`day0 quantize` packs an
      // unquantized miniature), so the entry's structure goes through unquantized.
      EXPECT_FALSE(synthesize_miniature(*full, {}, {}, dir.file("refused")).is_ok());
      full->weights.packed = PackedIntSpec{};
    }
    const std::string out = dir.file("mini");
    auto result = synthesize_miniature(*full, {}, {}, out);
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    expect_same_structure(*full, result->spec, entry.name);
    EXPECT_GE(result->shards.size(), 2u);
    EXPECT_LT(result->tensor_bytes, 16u << 20) << "default miniature should be a few MB";
    // The written config parses to the miniature spec.
    auto reparsed = load_model_config(out + "/config.json");
    ASSERT_TRUE(reparsed.is_ok()) << reparsed.status().to_string();
    EXPECT_TRUE(*reparsed == result->spec);

    auto manifest = build_tensor_manifest(result->spec);
    ASSERT_TRUE(manifest.is_ok());
    VerifyOptions options;
    options.manifest = &*manifest;
    options.allow_extra = true;
    auto report = verify_checkpoint(out, options);
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    EXPECT_TRUE(report->ok()) << format_verify_report(*report);
    EXPECT_EQ(report->shards[0].hash_status, "ok");
    EXPECT_EQ(report->n_tensors, result->n_tensors);
    // Without --allow-extra too: MTP layers are expected tensors of the manifest, never "extra".
    options.allow_extra = false;
    auto strict = verify_checkpoint(out, options);
    ASSERT_TRUE(strict.is_ok());
    EXPECT_EQ(strict->n_failed(), 0) << format_verify_report(*strict, 3);
    EXPECT_EQ(result->n_mtp_tensors > 0, full->n_mtp_layers > 0);
  }
}

TEST(Synth, DeterministicFromSeed) {
  auto full = catalog_model("qwen3-30b-a3b");
  ASSERT_TRUE(full.is_ok());
  TempDir dir;
  SynthOptions a;
  a.seed = 7;
  ASSERT_TRUE(synthesize_miniature(*full, {}, a, dir.file("a")).is_ok());
  ASSERT_TRUE(synthesize_miniature(*full, {}, a, dir.file("b")).is_ok());
  a.seed = 8;
  ASSERT_TRUE(synthesize_miniature(*full, {}, a, dir.file("c")).is_ok());
  EXPECT_EQ(read_file(dir.file("a/SHA256SUMS")), read_file(dir.file("b/SHA256SUMS")));
  EXPECT_NE(read_file(dir.file("a/SHA256SUMS")), read_file(dir.file("c/SHA256SUMS")));
  // Weights depend on (seed, name) only, not on the stream position.
  const auto longer = normal_values(3, "x", 8, 1.0f);
  EXPECT_EQ(normal_values(3, "x", 4, 1.0f), std::vector<float>(longer.begin(), longer.begin() + 4));
  EXPECT_NE(normal_values(3, "y", 4, 1.0f), normal_values(3, "x", 4, 1.0f));
}

TEST(Synth, Fp8AndMxfp4WeightsDequantizeToRealisticValues) {
  for (const char* name : {"deepseek-v3", "gpt-oss-20b"}) {
    SCOPED_TRACE(name);
    auto full = catalog_model(name);
    ASSERT_TRUE(full.is_ok());
    TempDir dir;
    SynthOptions options;
    options.seed = 1;
    auto result = synthesize_miniature(*full, {}, options, dir.file("m"));
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    auto ckpt = Checkpoint::open(dir.file("m"));
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    int checked = 0;
    for (const auto& tname : ckpt->tensor_names()) {
      const TensorView t = *ckpt->tensor(tname);
      std::vector<float> values;
      if (t.dtype == DType::kF8E4M3) {
        values = *dequant_fp8_block(t, *ckpt->tensor(tname + "_scale_inv"));
        // The reference values: the same normal draw, quantized with 3 mantissa bits.
        const auto ref = normal_values(1, tname, values.size(), 0.02f);
        for (size_t i = 0; i < values.size(); ++i) {
          ASSERT_NEAR(values[i], ref[i], std::fabs(ref[i]) / 15.0f + 1e-4f) << tname << " " << i;
        }
      } else if (tname.ends_with("_blocks")) {
        values = *dequant_mxfp4(t, *ckpt->tensor(tname.substr(0, tname.size() - 7) + "_scales"));
      } else if (t.dtype == DType::kBF16 && tname.ends_with("layernorm.weight")) {
        const auto norm = tensor_to_f32(t);
        ASSERT_TRUE(norm.is_ok());
        for (float v : *norm) ASSERT_EQ(v, 1.0f) << tname;
        continue;
      } else {
        continue;
      }
      double sum2 = 0;
      for (float v : values) {
        ASSERT_TRUE(std::isfinite(v)) << tname;
        sum2 += static_cast<double>(v) * v;
      }
      const double rms = std::sqrt(sum2 / static_cast<double>(values.size()));
      EXPECT_GT(rms, 0.012) << tname;
      EXPECT_LT(rms, 0.03) << tname;
      ++checked;
    }
    EXPECT_GT(checked, 4);
  }
}

// Bench shapes keep the release's attention widths (MLA ranks, head dims, the indexer) under the
// miniature's head count; the default miniature shrinks them.
TEST(Synth, ReleaseAttentionKeepsMlaAndIndexerWidths) {
  auto full = catalog_model("deepseek-v3.2");
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  ASSERT_TRUE(full->mla && full->indexer);
  MiniatureOptions dims;
  dims.hidden = 256;
  dims.heads = 4;
  auto small = make_miniature_spec(*full, dims);
  ASSERT_TRUE(small.is_ok()) << small.status().to_string();
  EXPECT_LT(small->mla->kv_lora_rank, full->mla->kv_lora_rank);
  dims.release_attention = true;
  auto wide = make_miniature_spec(*full, dims);
  ASSERT_TRUE(wide.is_ok()) << wide.status().to_string();
  EXPECT_EQ(wide->n_heads, 4);
  EXPECT_EQ(wide->mla->q_lora_rank, full->mla->q_lora_rank);
  EXPECT_EQ(wide->mla->kv_lora_rank, full->mla->kv_lora_rank);
  EXPECT_EQ(wide->mla->qk_nope_head_dim, full->mla->qk_nope_head_dim);
  EXPECT_EQ(wide->mla->qk_rope_head_dim, full->mla->qk_rope_head_dim);
  EXPECT_EQ(wide->mla->v_head_dim, full->mla->v_head_dim);
  ASSERT_TRUE(wide->indexer.has_value());
  EXPECT_EQ(wide->indexer->n_heads, full->indexer->n_heads);
  EXPECT_EQ(wide->indexer->head_dim, full->indexer->head_dim);
  EXPECT_EQ(wide->indexer->topk, full->indexer->topk);
}

TEST(Synth, OptionsShapeTheMiniatureAndBadOptionsAreRejected) {
  auto full = catalog_model("deepseek-v3");
  ASSERT_TRUE(full.is_ok());
  MiniatureOptions dims;
  dims.layers = 3;
  dims.hidden = 128;
  dims.experts = 8;
  dims.vocab = 512;
  auto mini = make_miniature_spec(*full, dims);
  ASSERT_TRUE(mini.is_ok()) << mini.status().to_string();
  EXPECT_EQ(mini->n_layers, 3);
  EXPECT_EQ(mini->hidden_size, 128);
  EXPECT_EQ(mini->vocab_size, 512);
  EXPECT_EQ(mini->moe->n_experts, 8);
  EXPECT_FALSE(mini->layers[0].moe);
  EXPECT_TRUE(mini->layers[1].moe);
  dims.layers = 1;
  EXPECT_EQ(make_miniature_spec(*full, dims).status().code(), StatusCode::kInvalidArgument);

  auto oss = catalog_model("gpt-oss-20b");
  MiniatureOptions odd;
  odd.hidden = 48;  // MXFP4 needs multiples of 32
  EXPECT_EQ(make_miniature_spec(*oss, odd).status().code(), StatusCode::kInvalidArgument);

  TempDir dir;
  testing::write_file(dir.file("taken"), {1});
  EXPECT_EQ(synthesize_miniature(*oss, {}, {}, dir.file("taken")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(synthesize_miniature(*oss, {}, {}, dir.file("no/such/parent")).status().code(),
            StatusCode::kNotFound);
  std::filesystem::create_directory(dir.file("empty"));
  EXPECT_TRUE(synthesize_miniature(*oss, {}, {}, dir.file("empty")).is_ok());
  // Nothing half-written is left beside the target.
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace day0
