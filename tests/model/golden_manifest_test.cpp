// The tensor manifest derived from each family's weight table against the checkpoints transformers
// itself wrote (tests/golden/*/model.safetensors + config.json): the same names, shapes and dtypes.
// An independent oracle: the manifest was otherwise only checked against itself and synth.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "day0/io/checkpoint.h"
#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> golden_folders() {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(fs::path(DAY0_TEST_DATA_DIR) / "golden")) {
    // One file, or shards with their index (SHARD_SIZES in golden_configs.py).
    if (entry.is_directory() && (fs::exists(entry.path() / "model.safetensors") ||
                                 fs::exists(entry.path() / "model.safetensors.index.json"))) {
      out.push_back(entry.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

class GoldenManifest : public ::testing::TestWithParam<std::string> {};

TEST(GoldenManifestList, EveryGoldenIsChecked) {
  EXPECT_GE(golden_folders().size(), 12u);
}

TEST_P(GoldenManifest, WeightTableEqualsTheCheckpointTransformersWrote) {
  const fs::path dir = fs::path(DAY0_TEST_DATA_DIR) / "golden" / GetParam();
  auto spec = load_model_config(dir / "config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  auto ckpt = Checkpoint::open(dir.string());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  // Names under the layout this save uses (Kimi K2.5's text layers as transformers writes them, a
  // release's own names).
  adopt_stored_layout(*manifest, [&](const std::string& name) { return ckpt->contains(name); });

  std::map<std::string, const TensorSpec*> expected, unused;
  for (const auto& t : manifest->tensors) expected[t.name] = &t;
  // Written by save_pretrained, never read (LongCat-Flash's zero-expert gate/up rows): allowed, with
  // the table's shape and dtype, never required.
  for (const auto& t : manifest->unused) unused[t.name] = &t;
  for (const std::string& name : ckpt->tensor_names()) {
    auto it = expected.find(name);
    if (it == expected.end() && unused.count(name)) {
      auto view = ckpt->tensor(name);
      ASSERT_TRUE(view.is_ok()) << view.status().to_string();
      const std::vector<int64_t> shape(view->shape.begin(), view->shape.end());
      EXPECT_EQ(shape, unused[name]->shape) << name << ": shape (unused tensor)";
      EXPECT_TRUE(unused[name]->accepts(view->dtype)) << name << ": dtype (unused tensor)";
      continue;
    }
    // Loaded by transformers, never by Day0 (an image-text wrapper's vision tower): accepted by name.
    const auto& ignored = manifest->ignored_prefixes;
    if (it == expected.end() && std::any_of(ignored.begin(), ignored.end(),
                                            [&](const std::string& p) { return name.starts_with(p); })) {
      continue;
    }
    if (it == expected.end()) {
      ADD_FAILURE() << name << ": in the transformers checkpoint, not in the weight table";
      continue;
    }
    auto view = ckpt->tensor(name);
    ASSERT_TRUE(view.is_ok()) << view.status().to_string();
    const TensorSpec& t = *it->second;
    const std::vector<int64_t> shape(view->shape.begin(), view->shape.end());
    EXPECT_EQ(shape, t.shape) << name << ": shape";
    EXPECT_TRUE(t.accepts(view->dtype))
        << name << ": stored " << dtype_name(view->dtype) << ", the table says " << dtype_name(t.dtype);
    expected.erase(it);
  }
  for (const auto& [name, t] : expected) {
    ADD_FAILURE() << name << ": in the weight table, not in the transformers checkpoint";
  }
}

// Kimi K2.5's text layers: language_model.model.layers.N in the release, ...blocks.N as transformers 5.24
// saves them (the golden). The table names the first and reads either; nothing outside the layers moves.
TEST(GoldenManifestAliases, KimiK25TextLayersReadUnderEitherPrefix) {
  auto spec = load_model_config(fs::path(DAY0_TEST_DATA_DIR) / "golden" / "kimi-k2.5" / "config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  const std::string layers = "language_model.model.layers.", blocks = "language_model.model.blocks.";
  TensorManifest release = *manifest, saved = *manifest;
  adopt_stored_layout(release, [&](const std::string& n) { return !n.starts_with(blocks); });
  adopt_stored_layout(saved, [&](const std::string& n) { return !n.starts_with(layers); });
  size_t moved = 0;
  for (size_t i = 0; i < manifest->tensors.size(); ++i) {
    const std::string& name = manifest->tensors[i].name;
    EXPECT_EQ(release.tensors[i].name, name);
    if (!name.starts_with(layers)) {
      EXPECT_EQ(saved.tensors[i].name, name);
      continue;
    }
    EXPECT_EQ(saved.tensors[i].name, blocks + name.substr(layers.size()));
    ++moved;
  }
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(moved + 3, manifest->tensors.size());  // embed_tokens, norm, lm_head stay
}

INSTANTIATE_TEST_SUITE_P(Families, GoldenManifest, ::testing::ValuesIn(golden_folders()),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace day0
