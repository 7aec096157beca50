// Engine, inspect and plan agree on the KV cache: for every golden checkpoint and every KV dtype, the
// planner's bytes per token and layer equal the row size of the engine's own block pool (built for
// that dtype), and its total per token equals what `inspect` prints.
#include <gtest/gtest.h>

#include <filesystem>

#include "day0/backends/backend.h"
#include "day0/model/config_parser.h"
#include "day0/model/model_memory.h"
#include "day0/model/tensor_manifest.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/runtime/model_loader.h"

namespace day0 {
namespace {

TEST(KvAgreement, PlannerBytesPerTokenEqualTheEnginePoolForEveryGoldenAndDtype) {
  auto backend = make_backend("reference");
  ASSERT_TRUE(backend.is_ok());
  int goldens = 0;
  for (const auto& dir : std::filesystem::directory_iterator(std::string(DAY0_TEST_DATA_DIR) + "/golden")) {
    if (!std::filesystem::exists(dir.path() / "config.json")) continue;
    SCOPED_TRACE(dir.path().filename().string());
    auto config = load_model_config(dir.path() / "config.json");
    ASSERT_TRUE(config.is_ok()) << config.status().to_string();
    if (!unimplemented_mechanisms(*config).empty()) continue;  // no engine pool yet (model_memory_test)
    ++goldens;
    auto model = load_model(dir.path().string());
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto manifest = build_tensor_manifest(model->spec);
    ASSERT_TRUE(manifest.is_ok());
    auto cost = plan::model_cost_from_spec(model->spec, *manifest, "golden");
    ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
    ASSERT_EQ(cost->n_layers(), model->spec.n_layers);
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
      SCOPED_TRACE(kv_dtype_name(dtype));
      EngineOptions options;
      options.kv_dtype = dtype;
      auto engine = Engine::create(model->spec, model->weights, **backend, options);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      const auto row = static_cast<double>((*engine)->kv_pool().bytes_per_token_row());
      EXPECT_GT(row, 0);
      // Linear-attention (Qwen3-Next) and Mamba-2 layers cache no K/V rows but a fixed state per
      // sequence; FFN-only layers (Nemotron-H) neither.
      for (size_t l = 0; l < cost->layers.size(); ++l) {
        const LayerSpec& ls = model->spec.layers[l];
        EXPECT_EQ(cost->layers[l].kv_bytes(dtype), layer_has_kv(ls) ? row : 0.0) << l;
        // A fixed state per sequence: recurrent layers, and compressed KV layers' partial groups.
        EXPECT_EQ(cost->layers[l].state_bytes_per_sequence > 0,
                  layer_is_recurrent(ls) || (ls.kv_compress_ratio > 0 && layer_has_kv(ls)))
            << l;
      }
      // Compressed attention (DeepSeek-V4) also keeps a share of an entry per token, in pool blocks of
      // their own (KvCache::entry_pages): the planner counts it beside the window's rows, and the pool
      // packs an entry (with its indexer key) in exactly the bytes the planner counts for it.
      double compressed = 0;
      for (const auto& layer : cost->layers) compressed += layer.compressed_kv_bytes(dtype);
      EXPECT_EQ(compressed > 0, model->spec.compressed_kv.has_value());
      const KvCache probe = (*engine)->new_cache();
      for (int64_t l = 0; l < probe.n_layers(); ++l) {
        if (!probe.compressed_layer(l)) continue;
        const LayerSpec& ls = model->spec.layers[static_cast<size_t>(l)];
        uint64_t entry = 0;
        for (CompressedEntries which : {CompressedEntries::kCompressor, CompressedEntries::kIndexer}) {
          const KvPages p = probe.entry_pages(l, which);
          if (p.second_width == 0) continue;
          EXPECT_EQ((*engine)->kv_pool().block_bytes() % static_cast<uint64_t>(p.block_tokens), 0u) << l;
          entry += (*engine)->kv_pool().block_bytes() / static_cast<uint64_t>(p.block_tokens);
        }
        EXPECT_EQ(entry, compressed_kv_entry_bytes(model->spec, ls, dtype)) << l;
        EXPECT_EQ(cost->layers[static_cast<size_t>(l)].compressed_kv_bytes(dtype) *
                      static_cast<double>(ls.kv_compress_ratio),
                  static_cast<double>(entry))
            << l;
      }
      const double rows = row * static_cast<double>(count_kv_layers(model->spec));
      EXPECT_EQ(cost->kv_bytes_per_token(dtype), rows + compressed);
      // The planner's state per sequence is what a sequence of a BF16 engine allocates (an F32 run keeps
      // its conv windows in float32).
      EngineOptions bf16 = options;
      bf16.precision = ActivationPrecision::kBF16;
      auto bf16_engine = Engine::create(model->spec, model->weights, **backend, bf16);
      ASSERT_TRUE(bf16_engine.is_ok()) << bf16_engine.status().to_string();
      EXPECT_EQ(cost->state_bytes_per_sequence(),
                static_cast<double>((*bf16_engine)->new_cache().state_bytes()));
      EXPECT_EQ((*engine)->new_cache().state_bytes(),
                recurrent_state_bytes_per_sequence(model->spec, KvDtype::kF32));
      EXPECT_EQ(rows, static_cast<double>(kv_cache_summary(model->spec, dtype).bytes_per_token));
    }
  }
  EXPECT_GE(goldens, 12);  // every golden checkpoint was found
}

}  // namespace
}  // namespace day0
