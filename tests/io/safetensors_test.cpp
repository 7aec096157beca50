#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/dequant.h"
#include "day0/io/safetensors_file.h"
#include "day0/io/safetensors_writer.h"
#include "io_fixtures.h"

namespace day0 {
namespace {

using testing::raw_safetensors;
using testing::TempDir;

Result<SafetensorsHeader> parse(const std::vector<uint8_t>& bytes) {
  return parse_safetensors_header(bytes, bytes.size());
}

TEST(SafetensorsHeader, ParsesTensorsMetadataAndOrder) {
  const auto bytes = raw_safetensors(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"e":{"dtype":"F8_E4M3","shape":[0,3],"data_offsets":[12,12]}})",
      std::vector<uint8_t>(12, 0));
  auto header = parse(bytes);
  ASSERT_TRUE(header.is_ok()) << header.status().to_string();
  ASSERT_EQ(header->tensors.size(), 3u);
  EXPECT_EQ(header->tensors[0].name, "a");  // file order
  EXPECT_EQ(header->tensors[1].name, "b");
  EXPECT_EQ(header->metadata.at("format"), "pt");
  ASSERT_NE(header->find("b"), nullptr);
  EXPECT_EQ(header->find("b")->dtype, DType::kF32);
  EXPECT_EQ(header->find("e")->numel(), 0u);
  EXPECT_EQ(header->find("missing"), nullptr);
}

struct BadHeaderCase {
  const char* label;
  std::string json;
  size_t data_bytes;
  StatusCode code;
  const char* message_part;
};

TEST(SafetensorsHeader, RejectsEveryMalformedHeaderWithAClearMessage) {
  std::string deep_nesting(100, ']');
  std::fill(deep_nesting.begin(), deep_nesting.begin() + 50, '[');
  const std::vector<BadHeaderCase> cases = {
      {"not json", "{\"a\":", 0, StatusCode::kParseError, "not valid JSON"},
      {"not an object", "[1,2]", 0, StatusCode::kParseError, "expected a JSON object"},
      {"unknown dtype", R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", 1,
       StatusCode::kUnsupported, "unknown dtype 'F7'"},
      {"missing shape", R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", 1, StatusCode::kParseError,
       "'shape'"},
      {"negative dim", R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1,
       StatusCode::kParseError, "non-negative"},
      {"wrong byte length", R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", 8,
       StatusCode::kParseError, "needs 16 bytes"},
      {"overflowing shape",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8,
       StatusCode::kOutOfRange, "overflows"},
      {"overlap",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
       6, StatusCode::kParseError, "overlap"},
      {"gap", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, StatusCode::kParseError, "gap"},
      {"end before begin", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4,
       StatusCode::kParseError, "end before begin"},
      {"past end of file", R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 10,
       StatusCode::kDataLoss, "truncated"},
      {"trailing bytes", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9,
       StatusCode::kParseError, "trailing"},
      {"metadata not strings", R"({"__metadata__":{"x":1}})", 0, StatusCode::kParseError, "__metadata__.x"},
      {"extra key", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":0}})", 1,
       StatusCode::kParseError, "unexpected key"},
      {"deep nesting", deep_nesting, 0, StatusCode::kParseError, "nests deeper"},
      {"partial bytes", R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
       StatusCode::kParseError, "whole number of bytes"},
  };
  for (const auto& c : cases) {
    auto header = parse(raw_safetensors(c.json, std::vector<uint8_t>(c.data_bytes, 0)));
    ASSERT_FALSE(header.is_ok()) << c.label;
    EXPECT_EQ(header.status().code(), c.code) << c.label << ": " << header.status().to_string();
    EXPECT_NE(header.status().message().find(c.message_part), std::string::npos)
        << c.label << ": " << header.status().to_string();
  }
}

TEST(SafetensorsHeader, RejectsAbsurdAndTruncatedLengths) {
  std::vector<uint8_t> bytes(16, 0);
  bytes[7] = 0x01;  // 2^56 bytes of header
  auto absurd = parse(bytes);
  ASSERT_FALSE(absurd.is_ok());
  EXPECT_EQ(absurd.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(absurd.status().message().find("exceeds the limit"), std::string::npos);

  auto past = parse(raw_safetensors("{}", {}));
  ASSERT_TRUE(past.is_ok());  // an empty header is a valid empty file
  auto cut = raw_safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {1});
  cut.resize(20);
  auto truncated = parse(cut);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("runs past the end"), std::string::npos);

  auto tiny = parse(std::vector<uint8_t>{1, 2, 3});
  EXPECT_EQ(tiny.status().code(), StatusCode::kDataLoss);
}

TEST(SafetensorsWriter, RoundTripsEveryWriterHelperAndMetadata) {
  TempDir dir;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  ASSERT_TRUE(w.add(tensor_f32("f", {2, 3}, {1, 2, 3, 4, 5, -6.5f})).is_ok());
  ASSERT_TRUE(w.add(tensor_i64("i", {3}, {-1, 0, 1LL << 40})).is_ok());
  ASSERT_TRUE(w.add(tensor_bf16("b", {2}, {1.0f, 1.00390625f})).is_ok());  // tie -> 1.0
  ASSERT_TRUE(w.add(tensor_bytes("q", DType::kF8E4M3, {1, 3}, {0x38, 0xc4, 0x7e})).is_ok());
  ASSERT_TRUE(w.add(tensor_bytes("u", DType::kU8, {}, {9})).is_ok());
  EXPECT_FALSE(w.add(tensor_f32("f", {1}, {0})).is_ok());  // duplicate
  EXPECT_FALSE(w.add(tensor_f32("__metadata__", {1}, {0})).is_ok());
  EXPECT_EQ(w.add(tensor_f32("big", {1LL << 62, 8}, {})).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(w.write(dir.file("x.safetensors")).is_ok());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no temp left

  auto file = SafetensorsFile::open(dir.file("x.safetensors"));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->header().data_start % 8, 0u);
  auto f = tensor_to_f32(*file->tensor("f"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*f, (std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
  auto i = file->tensor("i");
  int64_t big;
  std::memcpy(&big, i->data.data() + 16, 8);
  EXPECT_EQ(big, 1LL << 40);
  auto b = tensor_to_bf16(*file->tensor("b"));
  EXPECT_EQ(*b, (std::vector<uint16_t>{0x3f80, 0x3f80}));
  EXPECT_EQ(*tensor_to_f32(*file->tensor("q")), (std::vector<float>{1.0f, -3.0f, 448.0f}));
  EXPECT_EQ(file->tensor("u")->shape.size(), 0u);
  EXPECT_EQ(file->tensor("nope").status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsWriter, FillErrorsLeaveNoFileBehind) {
  TempDir dir;
  SafetensorsWriter w;
  ASSERT_TRUE(w.add(tensor_f32("f", {4}, {1, 2})).is_ok());  // 2 values for 4 elements
  Status st = w.write(dir.file("x.safetensors"));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("2 values given"), std::string::npos) << st.to_string();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Checkpoint, ShardedAndSingleFileLookups) {
  TempDir dir;
  CheckpointWriter w(/*max_shard_bytes=*/40);
  for (int k = 0; k < 5; ++k) {
    ASSERT_TRUE(
        w.add(tensor_f32(fmt::format("t{}", k), {4}, std::vector<float>(4, static_cast<float>(k)))).is_ok());
  }
  auto shards = w.write(dir.path());
  ASSERT_TRUE(shards.is_ok()) << shards.status().to_string();
  ASSERT_EQ(shards->size(), 3u);  // 16 bytes each, 2 per 40-byte shard
  EXPECT_EQ((*shards)[0], "model-00001-of-00003.safetensors");

  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->shards().size(), 3u);
  EXPECT_EQ(ckpt->tensor_names().size(), 5u);
  EXPECT_EQ((*tensor_to_f32(*ckpt->tensor("t4")))[0], 4.0f);
  EXPECT_EQ(ckpt->layout().index->total_size, 80u);
  EXPECT_EQ(ckpt->layout().index->weight_map.at("t4"), "model-00003-of-00003.safetensors");

  TempDir single;
  CheckpointWriter one(1 << 20, /*single_file=*/true);
  ASSERT_TRUE(one.add(tensor_f32("x", {1}, {7})).is_ok());
  ASSERT_TRUE(one.write(single.path()).is_ok());
  auto ck1 = Checkpoint::open(single.path());
  ASSERT_TRUE(ck1.is_ok()) << ck1.status().to_string();
  EXPECT_FALSE(ck1->layout().index.has_value());
  EXPECT_EQ((*tensor_to_f32(*ck1->tensor("x")))[0], 7.0f);
  auto direct = Checkpoint::open(single.file("model.safetensors"));
  EXPECT_TRUE(direct.is_ok());
}

// The page-cache hints of a mapping meant to be streamed many times change no byte read through it,
// and dropping the pages of a file that has gone names it.
TEST(Checkpoint, PageCacheHintsKeepEveryByteAndNameAVanishedFile) {
  TempDir dir;
  CheckpointWriter w(/*max_shard_bytes=*/uint64_t{3} << 20);
  std::vector<float> values(uint64_t{1} << 20);  // 4 MiB: two shards, each past one 2 MiB page
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) - 300.0f;
  ASSERT_TRUE(w.add(tensor_f32("a", {static_cast<int64_t>(values.size())}, values)).is_ok());
  ASSERT_TRUE(w.add(tensor_f32("b", {static_cast<int64_t>(values.size())}, values)).is_ok());
  ASSERT_TRUE(w.write(dir.path()).is_ok());
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  ASSERT_EQ(ckpt->shards().size(), 2u);
  ckpt->advise_huge_pages();  // refused where THP is off; a hint either way
  ASSERT_TRUE(ckpt->drop_cached_pages().is_ok());
  for (const char* name : {"a", "b"}) EXPECT_EQ(*tensor_to_f32(*ckpt->tensor(name)), values) << name;
  ASSERT_TRUE(ckpt->drop_cached_pages().is_ok());  // now mapped: those pages stay, the call still succeeds
  EXPECT_EQ(*tensor_to_f32(*ckpt->tensor("b")), values);

  const std::string second = ckpt->shards()[1].path();
  std::filesystem::remove(second);
  const Status gone = ckpt->drop_cached_pages();
  EXPECT_FALSE(gone.is_ok());
  EXPECT_NE(gone.message().find(second), std::string::npos) << gone.to_string();
  EXPECT_EQ(*tensor_to_f32(*ckpt->tensor("b")), values);  // the mapping still holds the file
}

TEST(Checkpoint, IndexProblemsAreReported) {
  TempDir dir;
  CheckpointWriter w(16);
  ASSERT_TRUE(w.add(tensor_f32("a", {4}, std::vector<float>(4, 1))).is_ok());
  ASSERT_TRUE(w.add(tensor_f32("b", {4}, std::vector<float>(4, 2))).is_ok());
  ASSERT_TRUE(w.write(dir.path()).is_ok());
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  auto missing = Checkpoint::open(dir.path());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model-00002-of-00002.safetensors"), std::string::npos);

  testing::write_file(dir.file("model.safetensors.index.json"),
                      {'{', '"', 'w', 'e', 'i', 'g', 'h', 't', '_', 'm', 'a', 'p', '"', ':', '1', '}'});
  EXPECT_EQ(Checkpoint::open(dir.path()).status().code(), StatusCode::kParseError);
  const std::string evil = R"({"weight_map":{"a":"../etc/passwd"}})";
  testing::write_file(dir.file("model.safetensors.index.json"), {evil.begin(), evil.end()});
  auto escaped = Checkpoint::open(dir.path());
  EXPECT_NE(escaped.status().message().find("not a plain file name"), std::string::npos);
  EXPECT_EQ(Checkpoint::open(dir.file("nothing")).status().code(), StatusCode::kNotFound);
}

// A float total_size beyond uint64 (converting it was undefined behaviour) is a parse error naming the
// key; a float one in range (some writers emit 1.2e10) is still read.
TEST(Checkpoint, FloatTotalSizeOutOfRangeIsReported) {
  TempDir dir;
  CheckpointWriter w(16);
  ASSERT_TRUE(w.add(tensor_f32("a", {4}, std::vector<float>(4, 1))).is_ok());
  ASSERT_TRUE(w.add(tensor_f32("b", {4}, std::vector<float>(4, 2))).is_ok());
  ASSERT_TRUE(w.write(dir.path()).is_ok());
  const std::string weight_map =
      R"("weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"})";
  const std::string huge = R"({"metadata":{"total_size":3e30},)" + weight_map + "}";
  testing::write_file(dir.file("model.safetensors.index.json"), {huge.begin(), huge.end()});
  auto bad = Checkpoint::open(dir.path());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kParseError);
  EXPECT_NE(bad.status().message().find("total_size"), std::string::npos) << bad.status().to_string();
  const std::string fine = R"({"metadata":{"total_size":3.2e1},)" + weight_map + "}";
  testing::write_file(dir.file("model.safetensors.index.json"), {fine.begin(), fine.end()});
  auto ok = Checkpoint::open(dir.path());
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(ok->layout().index->total_size, 32u);
}

}  // namespace
}  // namespace day0
