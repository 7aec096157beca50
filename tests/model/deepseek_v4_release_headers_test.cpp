// DeepSeek-V4-Flash's weight table against the release's own safetensors headers
// (tests/data/deepseek-v4-flash-release-headers.json, transcribed from a public listing of the release's
// index and shard headers; its source is recorded there): every listed tensor under the release's names
// with the listed dtype and shape, and the whole table, MTP layer included, against the index's tensor
// count, byte total and counts by name suffix and by kind of block scale.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {
namespace {

nlohmann::json release_headers() {
  std::ifstream in(std::filesystem::path(DAY0_TEST_DATA_DIR) / "data" /
                   "deepseek-v4-flash-release-headers.json");
  return nlohmann::json::parse(in);
}

// The catalog entry's table (MTP layer included) under the release's names and dtypes.
TensorManifest release_table() {
  auto spec = catalog_model("deepseek-v4-flash");
  EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto table = build_tensor_manifest(*spec);
  EXPECT_TRUE(table.is_ok()) << table.status().to_string();
  const StoredLayout* layout = release_layout(*table);
  EXPECT_NE(layout, nullptr);
  return to_stored_layout(*table, *layout);
}

// The name's last dotted part ("layers.0.attn.wq_a.scale" -> "scale", "hc_head_fn" -> itself).
std::string suffix(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

TEST(DeepseekV4ReleaseHeaders, EveryListedTensorHasItsDtypeAndShape) {
  const nlohmann::json headers = release_headers();
  ASSERT_EQ(headers["model"], "deepseek-v4-flash");
  const TensorManifest table = release_table();
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& t : table.tensors) by_name[t.name] = &t;
  ASSERT_GE(headers["tensors"].size(), 20u);
  for (const auto& [name, listed] : headers["tensors"].items()) {
    SCOPED_TRACE(name);
    const auto it = by_name.find(name);
    ASSERT_NE(it, by_name.end()) << "the table has no tensor of this name";
    EXPECT_EQ(dtype_name(it->second->dtype), listed["dtype"].get<std::string>());
    EXPECT_EQ(it->second->shape, listed["shape"].get<std::vector<int64_t>>());
  }
}

// The index covers the whole release: as many tensors as the table lists (none missing, none extra), as
// many bytes as their dtypes and shapes make, and the same count of each kind of name.
TEST(DeepseekV4ReleaseHeaders, TheTableMatchesTheWholeIndex) {
  const nlohmann::json index = release_headers()["index"];
  const TensorManifest table = release_table();
  uint64_t bytes = 0;
  std::map<std::string, int64_t> suffixes, scales;
  for (const TensorSpec& t : table.tensors) {
    bytes += t.bytes;
    ++suffixes[suffix(t.name)];
    if (suffix(t.name) != "scale") continue;
    const std::string kind = t.name.find(".ffn.experts.") != std::string::npos          ? "ffn.experts"
                             : t.name.find(".ffn.shared_experts.") != std::string::npos ? "ffn.shared_experts"
                             : t.name.find(".attn.") != std::string::npos               ? "attn"
                                                                                        : "other";
    ++scales[kind];
  }
  EXPECT_EQ(static_cast<int64_t>(table.tensors.size()), index["num_tensors"].get<int64_t>());
  EXPECT_EQ(bytes, index["total_size"].get<uint64_t>());
  int64_t listed = 0;
  for (const auto& [name, count] : index["suffix_counts"].items()) {
    EXPECT_EQ(suffixes[name], count.get<int64_t>()) << name;
    listed += count.get<int64_t>();
  }
  // What the suffix table leaves out: the two hyper-connection heads (the model's and the MTP layer's).
  EXPECT_EQ(index["num_tensors"].get<int64_t>() - listed, 6);
  for (const char* head : {"hc_head_fn", "hc_head_base", "hc_head_scale"})
    EXPECT_EQ(suffixes[head], 2) << head;
  for (const auto& [kind, count] : index["scale_counts"].items()) {
    EXPECT_EQ(scales[kind], count.get<int64_t>()) << kind;
  }
}

}  // namespace
}  // namespace day0
