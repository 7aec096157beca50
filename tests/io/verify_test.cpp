// verify_checkpoint on a small sharded checkpoint, clean and with each kind of damage.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/io/checkpoint_verify.h"
#include "day0/io/safetensors_writer.h"
#include "io_fixtures.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";

// Two shards: shard 1 holds embed (BF16 [8, 4]) and layer 0 (F32 [4, 4] x 2), shard 2 the rest.
class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CheckpointWriter w(/*max_shard_bytes=*/200);
    add(w, "model.embed_tokens.weight", DType::kBF16, {8, 4});
    add(w, "model.layers.0.self_attn.q_proj.weight", DType::kF32, {4, 4});
    add(w, "model.layers.0.mlp.down_proj.weight", DType::kF32, {4, 4});
    add(w, "model.layers.1.mlp.down_proj.weight", DType::kF32, {4, 4});
    add(w, "model.norm.weight", DType::kF32, {4});
    auto shards = w.write(dir_.path());
    ASSERT_TRUE(shards.is_ok()) << shards.status().to_string();
    ASSERT_EQ(*shards, (std::vector<std::string>{kShard1, kShard2}));
    VerifyOptions write;
    write.write_hashes = true;
    auto first = verify_checkpoint(dir_.path(), write);
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    ASSERT_TRUE(first->ok()) << format_verify_report(*first);
  }

  void add(CheckpointWriter& w, const std::string& name, DType dtype, std::vector<int64_t> shape) {
    int64_t layer = -1;
    if (name.find("layers.") != std::string::npos) layer = name[name.find("layers.") + 7] - '0';
    manifest_.tensors.push_back({name, shape, dtype, TensorRole::kAttention, layer, -1, 0, 0});
    const auto bytes = *tensor_byte_size(dtype, shape);
    std::vector<uint8_t> data(bytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + name.size());
    ASSERT_TRUE(w.add(tensor_bytes(name, dtype, std::move(shape), std::move(data))).is_ok());
  }

  VerifyReport verify(VerifyOptions options = {}) {
    options.manifest = &manifest_;
    auto report = verify_checkpoint(dir_.path(), options);
    EXPECT_TRUE(report.is_ok()) << report.status().to_string();
    return report.is_ok() ? *report : VerifyReport{};
  }

  // Rewrites a shard's header JSON through `edit`, keeping its data bytes.
  void edit_header(const std::string& shard, const std::function<void(nlohmann::json&)>& edit) {
    auto bytes = read_file(dir_.file(shard));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
    auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
    edit(header);
    const std::vector<uint8_t> data(bytes.begin() + 8 + static_cast<int64_t>(n), bytes.end());
    write_file(dir_.file(shard), testing::raw_safetensors(header.dump(), data));
  }

  static const Finding* find(const VerifyReport& r, const std::string& kind) {
    for (const auto& f : r.findings) {
      if (f.kind == kind) return &f;
    }
    return nullptr;
  }

  TempDir dir_;
  TensorManifest manifest_;
};

TEST_F(VerifyTest, CleanCheckpointPassesWithHashesFromSha256Sums) {
  const auto report = verify();
  EXPECT_TRUE(report.ok()) << format_verify_report(report);
  EXPECT_EQ(report.n_tensors, 5);
  EXPECT_EQ(report.n_manifest_tensors, 5);
  ASSERT_EQ(report.shards.size(), 2u);
  EXPECT_EQ(report.shards[0].hash_status, "ok");
  EXPECT_EQ(report.shards[1].hash_status, "ok");
  EXPECT_EQ(report.hash_source, dir_.file("SHA256SUMS"));
  ASSERT_EQ(report.other_files.size(), 1u);  // the index, listed when the hashes were written
  EXPECT_EQ(report.other_files[0].hash_status, "ok");
  const std::string text = format_verify_report(report);
  EXPECT_NE(text.find("Summary: OK"), std::string::npos) << text;
  EXPECT_TRUE(verify_report_json(report)["ok"].get<bool>());
}

TEST_F(VerifyTest, FlippedByteFailsTheHashAndNamesTheShard) {
  auto bytes = read_file(dir_.file(kShard2));
  bytes[bytes.size() - 3] ^= 0x01;  // inside tensor data: the structure stays valid
  write_file(dir_.file(kShard2), bytes);
  const auto report = verify();
  EXPECT_FALSE(report.ok());
  const Finding* f = find(report, "hash_mismatch");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_EQ(f->shard, kShard2);
  EXPECT_EQ(f->expected.size(), 64u);
  EXPECT_NE(f->expected, f->found);
  EXPECT_EQ(report.n_failed(), 1);
  EXPECT_NE(format_verify_report(report).find("FAIL  hash_mismatch"), std::string::npos);
}

TEST_F(VerifyTest, TruncatedShardNamesTheCutTensorAndSizes) {
  fs::resize_file(dir_.file(kShard1), fs::file_size(dir_.file(kShard1)) - 10);
  const auto report = verify();
  const Finding* f = find(report, "truncated_shard");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_EQ(f->shard, kShard1);
  EXPECT_EQ(f->tensor, "model.layers.0.mlp.down_proj.weight");  // the last tensor of the shard
  EXPECT_NE(f->expected, f->found);
  EXPECT_EQ(report.shards[0].status, "truncated");
  EXPECT_NE(find(report, "hash_mismatch"), nullptr);
}

TEST_F(VerifyTest, DeletedShardIsMissingWithItsTensors) {
  fs::remove(dir_.file(kShard2));
  const auto report = verify();
  const Finding* f = find(report, "missing_shard");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->shard, kShard2);
  const Finding* t = find(report, "missing_tensor");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shard, kShard2);
  EXPECT_NE(t->message.find("missing"), std::string::npos);
  EXPECT_EQ(report.shards[1].status, "missing");
}

TEST_F(VerifyTest, TensorRemovedFromAHeaderIsMissingAndOffIndex) {
  edit_header(kShard2, [](nlohmann::json& h) {
    // Drop model.norm.weight (the last tensor: the data shrinks with it below).
    h.erase("model.norm.weight");
  });
  auto bytes = read_file(dir_.file(kShard2));
  bytes.erase(bytes.end() - 16, bytes.end());
  write_file(dir_.file(kShard2), bytes);
  const auto report = verify();
  const Finding* missing = find(report, "missing_tensor");
  ASSERT_NE(missing, nullptr) << format_verify_report(report);
  EXPECT_EQ(missing->tensor, "model.norm.weight");
  EXPECT_EQ(missing->expected, "F32 [4]");
  const Finding* index = find(report, "index_mismatch");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->shard, kShard2);
}

TEST_F(VerifyTest, ChangedShapeAndDtypeAreReportedWithExpectedAndFound) {
  edit_header(kShard1, [](nlohmann::json& h) {
    h["model.layers.0.self_attn.q_proj.weight"]["shape"] = {2, 8};
    h["model.embed_tokens.weight"]["dtype"] = "F16";
  });
  const auto report = verify();
  const Finding* shape = find(report, "shape_mismatch");
  ASSERT_NE(shape, nullptr) << format_verify_report(report);
  EXPECT_EQ(shape->tensor, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(shape->expected, "F32 [4, 4]");
  EXPECT_EQ(shape->found, "F32 [2, 8]");
  EXPECT_EQ(shape->shard, kShard1);
  const Finding* dtype = find(report, "dtype_mismatch");
  ASSERT_NE(dtype, nullptr);
  EXPECT_EQ(dtype->found, "F16 [8, 4]");
}

TEST_F(VerifyTest, OverlappingOffsetsAndBadLengthsAreInvalidShards) {
  const auto shard1 = read_file(dir_.file(kShard1));
  edit_header(kShard1, [](nlohmann::json& h) {
    h["model.layers.0.self_attn.q_proj.weight"]["data_offsets"] = {60, 124};
  });
  auto report = verify();
  const Finding* f = find(report, "invalid_header");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_NE(f->message.find("overlap"), std::string::npos) << f->message;
  EXPECT_EQ(f->shard, kShard1);
  write_file(dir_.file(kShard1), shard1);

  auto bytes = read_file(dir_.file(kShard2));
  bytes[0] = 0xff;
  bytes[1] = 0xff;
  bytes[2] = 0x0f;  // ~1 MB of header in a file far smaller: past EOF
  write_file(dir_.file(kShard2), bytes);
  report = verify();
  f = find(report, "truncated_shard");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_NE(f->message.find("runs past the end"), std::string::npos) << f->message;

  bytes[6] = 0x7f;  // absurd: ~3.6e16 bytes
  write_file(dir_.file(kShard2), bytes);
  report = verify();
  f = find(report, "invalid_header");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_NE(f->message.find("exceeds the limit"), std::string::npos) << f->message;
}

TEST_F(VerifyTest, ExtraTensorsFailUnlessAllowedAndMtpLayersAreNamed) {
  manifest_.tensors.erase(std::remove_if(manifest_.tensors.begin(), manifest_.tensors.end(),
                                         [](const TensorSpec& t) { return t.layer == 1; }),
                          manifest_.tensors.end());
  auto report = verify();
  const Finding* f = find(report, "extra_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->failed);
  EXPECT_EQ(f->tensor, "model.layers.1.mlp.down_proj.weight");
  EXPECT_NE(f->message.find("past the model's last layer 0"), std::string::npos) << f->message;
  VerifyOptions allow;
  allow.allow_extra = true;
  report = verify(allow);
  EXPECT_TRUE(report.ok()) << format_verify_report(report);
  f = find(report, "extra_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->failed);
  EXPECT_NE(f->message.find("--allow-extra"), std::string::npos);
}

TEST_F(VerifyTest, LfsPointerInPlaceOfAShardIsExplained) {
  const std::string pointer =
      "version https://git-lfs.github.com/spec/v1\noid sha256:" + std::string(64, 'a') + "\nsize 999\n";
  write_file(dir_.file(kShard2), {pointer.begin(), pointer.end()});
  const auto report = verify();
  const Finding* f = find(report, "lfs_pointer");
  ASSERT_NE(f, nullptr) << format_verify_report(report);
  EXPECT_EQ(f->expected, "999 bytes of safetensors data");
  EXPECT_NE(f->message.find("git lfs pull"), std::string::npos);
}

TEST_F(VerifyTest, HashListOptionsAndBadInput) {
  // An LFS pointer directory given with --hashes: a size mismatch is its own finding.
  TempDir pointers;
  const auto sums = read_file(dir_.file("SHA256SUMS"));
  const std::string text(sums.begin(), sums.end());
  const std::string shard1_hex = text.substr(text.find(kShard1) - 66, 64);
  const std::string ptr =
      "version https://git-lfs.github.com/spec/v1\noid sha256:" + shard1_hex + "\nsize 1\n";
  write_file(pointers.file(kShard1), {ptr.begin(), ptr.end()});
  VerifyOptions options;
  options.hashes_path = pointers.path();
  auto report = verify(options);
  EXPECT_EQ(report.shards[0].hash_status, "ok");
  const Finding* size = find(report, "size_mismatch");
  ASSERT_NE(size, nullptr) << format_verify_report(report);
  EXPECT_EQ(size->expected, "1 bytes");
  EXPECT_EQ(report.shards[1].hash_status, "no expected hash");

  VerifyOptions no_hash;
  no_hash.check_hashes = false;
  EXPECT_EQ(verify(no_hash).bytes_hashed, 0u);
  EXPECT_EQ(verify_checkpoint(dir_.file("nowhere"), {}).status().code(), StatusCode::kNotFound);
  VerifyOptions bad;
  bad.hashes_path = dir_.file("nowhere.json");
  EXPECT_FALSE(verify_checkpoint(dir_.path(), bad).is_ok());
}

}  // namespace
}  // namespace day0
