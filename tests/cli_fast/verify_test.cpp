#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

class CliVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("day0_verify_cli_");
    model_ = dir_ + "/v3";
    CliResult r = run_cli({"synth", "deepseek-v3", "--out", model_, "--seed", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string first_shard() const {
    for (const auto& e : fs::directory_iterator(model_)) {
      if (e.path().filename().string().starts_with("model-00001")) return e.path().string();
    }
    return "";
  }

  std::string dir_;
  std::string model_;
};

// The MTP layer (num_nextn_predict_layers) is part of the model's tensor table: a release that ships
// it verifies clean, and the report says how many tensors decoding does not read.
TEST_F(CliVerify, MtpLayersAreExpectedAndCounted) {
  CliResult strict = run_cli({"verify", model_});
  EXPECT_EQ(strict.exit_code, 0) << strict.out << strict.err;
  EXPECT_NE(strict.out.find("Summary: OK"), std::string::npos) << strict.out;
  EXPECT_NE(strict.out.find("multi-token-prediction, not read by decoding"), std::string::npos) << strict.out;
  EXPECT_EQ(strict.out.find("extra_tensor"), std::string::npos) << strict.out;
  CliResult json = run_cli({"verify", model_, "--json"});
  ASSERT_EQ(json.exit_code, 0);
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["shards"][0]["hash_status"], "ok");
  EXPECT_EQ(j["n_tensors"], j["n_manifest_tensors"]);
  EXPECT_GT(j["n_mtp_tensors"].get<int64_t>(), 0);
  EXPECT_LT(j["n_mtp_tensors"].get<int64_t>(), j["n_manifest_tensors"].get<int64_t>());
}

TEST_F(CliVerify, FlippedByteFailsWithTheShardNamed) {
  const std::string shard = first_shard();
  ASSERT_FALSE(shard.empty());
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  CliResult r = run_cli({"verify", model_, "--allow-extra"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("hash_mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fs::path(shard).filename().string()), std::string::npos);
  EXPECT_NE(r.out.find("Summary: FAILED"), std::string::npos);
}

TEST_F(CliVerify, DeletedAndTruncatedShardsAndBadInput) {
  const std::string shard = first_shard();
  fs::resize_file(shard, fs::file_size(shard) / 2);
  CliResult truncated = run_cli({"verify", model_, "--allow-extra", "--no-hash"});
  EXPECT_EQ(truncated.exit_code, 1);
  EXPECT_NE(truncated.out.find("truncated_shard"), std::string::npos) << truncated.out;
  fs::remove(shard);
  CliResult missing = run_cli({"verify", model_, "--allow-extra", "--json"});
  EXPECT_EQ(missing.exit_code, 1);
  const auto j = nlohmann::json::parse(missing.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["shards"][0]["status"], "missing");

  EXPECT_EQ(run_cli({"verify", dir_ + "/nothing"}).exit_code, 2);
  EXPECT_EQ(run_cli({"verify", model_, "--config", "no-such-model"}).exit_code, 2);
  EXPECT_EQ(run_cli({"verify", model_, "--hashes", dir_ + "/none.json"}).exit_code, 2);
}

TEST_F(CliVerify, WriteHashesThenCheckAgainstThem) {
  fs::remove(model_ + "/SHA256SUMS");
  CliResult none = run_cli({"verify", model_, "--allow-extra"});
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_NE(none.out.find("no hash list"), std::string::npos) << none.out;
  CliResult write = run_cli({"verify", model_, "--allow-extra", "--write-hashes"});
  EXPECT_EQ(write.exit_code, 0) << write.err;
  EXPECT_TRUE(fs::exists(model_ + "/SHA256SUMS"));
  // A wrong structure from another config: the shapes differ.
  CliResult other = run_cli({"verify", model_, "--config", "kimi-k2", "--no-hash"});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.out.find("shape_mismatch"), std::string::npos) << other.out.substr(0, 2000);
}

}  // namespace
}  // namespace day0::testing
