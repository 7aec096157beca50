#include <gtest/gtest.h>

#include <string>

#include "day0/io/hash_manifest.h"
#include "day0/io/progress.h"
#include "day0/io/sha256.h"
#include "io_fixtures.h"

namespace day0 {
namespace {

using testing::TempDir;
using testing::write_file;

const std::string kAbc =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";  // FIPS 180-2 "abc"
const std::string kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

TEST(Sha256, KnownVectorsAndStreamedFilesAgree) {
  EXPECT_EQ(sha256_hex(bytes_of("abc")), kAbc);
  EXPECT_EQ(sha256_hex({}), kEmpty);
  TempDir dir;
  std::vector<uint8_t> big(20u << 20);  // spans several 8 MiB read chunks
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  write_file(dir.file("big"), big);
  write_file(dir.file("abc"), bytes_of("abc"));
  write_file(dir.file("empty"), {});
  uint64_t seen = 0;
  auto digests =
      sha256_files({dir.file("big"), dir.file("abc"), dir.file("empty"), dir.file("none")}, 3,
                   [&](uint64_t n) { seen += n; });  // hashing threads report through a lock-free add
  ASSERT_EQ(digests.size(), 4u);
  EXPECT_EQ(*digests[0], sha256_hex(big));
  EXPECT_EQ(*digests[1], kAbc);
  EXPECT_EQ(*digests[2], kEmpty);
  EXPECT_EQ(digests[3].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(seen, big.size() + 3);
}

TEST(HashManifest, ParsesSha256SumsInTextAndBinaryMode) {
  const std::string text =
      kAbc + "  ./model-00001-of-00002.safetensors\n" + "# comment\n\n" +
      "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD *config.json\r\n";
  auto m = parse_sha256sums(text, "SUMS");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at("model-00001-of-00002.safetensors").sha256, kAbc);
  EXPECT_EQ(m->at("config.json").sha256, kAbc);  // lower-cased
  auto bad = parse_sha256sums("abc  file\n", "SUMS");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("SUMS:1"), std::string::npos);
  EXPECT_FALSE(parse_sha256sums(std::string(64, 'g') + "  f\n", "S").is_ok());
}

TEST(HashManifest, ParsesLfsPointersJsonMapsAndHubSiblings) {
  const std::string pointer =
      "version https://git-lfs.github.com/spec/v1\noid sha256:" + kAbc + "\nsize 4955\n";
  auto p = parse_lfs_pointer(pointer, "shard");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->sha256, kAbc);
  EXPECT_EQ(p->size, 4955u);
  EXPECT_FALSE(parse_lfs_pointer("version https://git-lfs.github.com/spec/v1\nsize 3\n", "s").is_ok());

  auto flat = parse_hash_json(
      R"({"a.safetensors": ")" + kAbc + R"(", "b": {"sha256": ")" + kEmpty + R"(", "size": 0}})", "h.json");
  ASSERT_TRUE(flat.is_ok()) << flat.status().to_string();
  EXPECT_EQ(flat->at("b").size, 0u);
  auto hub = parse_hash_json(R"({"siblings": [{"rfilename": "config.json"},
      {"rfilename": "model.safetensors", "lfs": {"sha256": ")" +
                                 kAbc + R"(", "size": 12}}]})",
                             "api.json");
  ASSERT_TRUE(hub.is_ok()) << hub.status().to_string();
  ASSERT_EQ(hub->size(), 1u);
  EXPECT_EQ(hub->at("model.safetensors").size, 12u);

  TempDir dir;
  write_file(dir.file("model-00001-of-00001.safetensors"), bytes_of(pointer));
  write_file(dir.file("notes.txt"), bytes_of("hello"));
  auto from_dir = load_hash_manifest(dir.path());
  ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
  ASSERT_EQ(from_dir->size(), 1u);
  EXPECT_EQ(from_dir->at("model-00001-of-00001.safetensors").sha256, kAbc);
  write_file(dir.file("h.json"), bytes_of(R"({"x": ")" + kEmpty + R"("})"));
  EXPECT_EQ(load_hash_manifest(dir.file("h.json"))->at("x").sha256, kEmpty);
  EXPECT_EQ(load_hash_manifest(dir.file("absent")).status().code(), StatusCode::kNotFound);
}

TEST(HashManifest, WritesWhatItReads) {
  TempDir dir;
  ASSERT_TRUE(write_sha256sums(dir.file("SHA256SUMS"), {{"b", kEmpty}, {"a", kAbc}}).is_ok());
  auto back = load_hash_manifest(dir.file("SHA256SUMS"));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->at("a").sha256, kAbc);
  EXPECT_EQ(back->at("b").sha256, kEmpty);
  EXPECT_EQ(format_sha256sums({{"a", kAbc}}), kAbc + "  a\n");
}

TEST(Progress, RendersBarBytesRateAndEta) {
  const std::string line = render_progress("sha256", 500'000'000, 1'000'000'000, 2.0, 10);
  EXPECT_NE(line.find("[#####     ]"), std::string::npos) << line;
  EXPECT_NE(line.find("500.00 MB / 1.00 GB"), std::string::npos) << line;
  EXPECT_NE(line.find("250.00 MB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 2.00 s"), std::string::npos) << line;
  EXPECT_NE(render_progress("x", 5, 5, 1.0, 0).find("done"), std::string::npos);
}

}  // namespace
}  // namespace day0
