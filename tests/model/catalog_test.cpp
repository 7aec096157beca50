// The built-in catalog: every entry parses, equals the release config it transcribes, round-trips
// through to_hf_config, and MODEL arguments resolve to folders, files or catalog names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/param_count.h"
#include "model_test_support.h"

namespace day0 {
namespace {

TEST(Catalog, ListsTheReleasesTheIssueNames) {
  for (const char* name : {"deepseek-v3", "deepseek-r1", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b",
                           "qwen3-coder-480b-a35b", "qwen3-8b", "qwen2-57b-a14b", "glm-4.5", "gpt-oss-120b",
                           "gpt-oss-20b", "mixtral-8x7b", "mixtral-8x22b", "llama-3.1-8b", "llama-3.1-70b",
                           "llama-3.1-405b", "deepseek-v2", "deepseek-v2-lite"}) {
    EXPECT_NE(find_catalog_entry(name), nullptr) << name;
  }
}

// The catalog is data/catalog/<name>.json, embedded in the order of its entries.txt: a file left out
// of that list, or an entry whose file is gone, fails here.
TEST(Catalog, EveryDataFileIsAnEntryAndEveryEntryAFile) {
  const auto dir = std::filesystem::path(DAY0_SOURCE_DIR) / "data" / "catalog";
  std::set<std::string> files;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    if (file.path().extension() != ".json") continue;
    const std::string name = file.path().stem().string();
    files.insert(name);
    const CatalogEntry* entry = find_catalog_entry(name);
    EXPECT_NE(entry, nullptr) << file.path() << " is not embedded: add its name to data/catalog/entries.txt";
    if (entry == nullptr) continue;
    std::ifstream in(file.path());
    const auto doc = nlohmann::json::parse(in);
    EXPECT_EQ(doc.at("config"), entry->config) << name << ": the embedded copy differs from the file";
    EXPECT_EQ(doc.at("description"), entry->description) << name;
    EXPECT_EQ(doc.at("source"), entry->source) << name;
  }
  for (const auto& entry : model_catalog()) {
    EXPECT_EQ(files.count(entry.name), 1u)
        << entry.name << " is embedded without data/catalog/" << entry.name << ".json";
  }
  EXPECT_EQ(files.size(), model_catalog().size());
}

TEST(Catalog, EveryEntryEqualsTheConfigItCameFrom) {
  const auto dir = testing::shared_configs_dir();
  if (dir.empty()) GTEST_SKIP() << "shared configs not found at " << DAY0_SHARED_DIR << "/configs";
  int compared = 0;
  for (const auto& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    auto from_catalog = catalog_model(entry.name);
    ASSERT_TRUE(from_catalog.is_ok()) << from_catalog.status().to_string();
    if (entry.source.empty()) continue;
    auto from_file = load_model_config(dir / entry.source);
    ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();
    EXPECT_TRUE(*from_catalog == *from_file);
    ++compared;
  }
  EXPECT_GE(compared, 17);
}

TEST(Catalog, EveryEntryRoundTripsThroughToHfConfig) {
  for (const auto& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    auto spec = catalog_model(entry.name);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    const nlohmann::json written = to_hf_config(*spec);
    auto reparsed = parse_model_config(written, "written");
    ASSERT_TRUE(reparsed.is_ok()) << reparsed.status().to_string() << "\n" << written.dump(2);
    EXPECT_TRUE(*reparsed == *spec) << written.dump(2);
  }
}

TEST(Catalog, DeepseekV2LiteMatchesItsPublishedCounts) {
  auto spec = catalog_model("deepseek-v2-lite");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto counts = count_params(*spec);
  ASSERT_TRUE(counts.is_ok());
  // Published: 15.7B total, 2.4B active. The active figure leaves out the input embedding (with it,
  // 2.66B) and cuts the digits: 2.45B -> "2.4B".
  EXPECT_NEAR(static_cast<double>(counts->total), 15.7e9, 0.05e9);
  EXPECT_GE(counts->active_without_embedding, 2'400'000'000);
  EXPECT_LT(counts->active_without_embedding, 2'500'000'000);
}

TEST(Catalog, UnknownNameSuggestsTheNearest) {
  auto spec = catalog_model("deepseek-v4");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("nearest: deepseek-v"), std::string::npos)
      << spec.status().message();
}

TEST(ResolveModel, FolderFileAndCatalogName) {
  auto by_name = resolve_model("qwen3-8b");
  ASSERT_TRUE(by_name.is_ok()) << by_name.status().to_string();
  EXPECT_TRUE(by_name->from_catalog);
  EXPECT_EQ(by_name->source, "catalog:qwen3-8b");

  const auto dir = testing::shared_configs_dir();
  if (dir.empty()) GTEST_SKIP() << "shared configs not found";
  auto by_folder = resolve_model((dir / "qwen3-8b").string());
  ASSERT_TRUE(by_folder.is_ok()) << by_folder.status().to_string();
  EXPECT_FALSE(by_folder->from_catalog);
  EXPECT_TRUE(by_folder->spec == by_name->spec);
  auto by_file = resolve_model((dir / "qwen3-8b" / "config.json").string());
  ASSERT_TRUE(by_file.is_ok());
  EXPECT_TRUE(by_file->spec == by_name->spec);
}

TEST(ResolveModel, MissingPathIsNotFound) {
  auto missing = resolve_model("/nonexistent/day0/model");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/day0/model"), std::string::npos);
}

}  // namespace
}  // namespace day0
