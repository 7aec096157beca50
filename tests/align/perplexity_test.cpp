// The .kld format (round trip, every size checked on reading) and the KL statistics on hand-worked rows.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "day0/align/perplexity.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/day0-kld-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

TEST(Perplexity, LogSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};
  std::vector<float> out(2);
  log_softmax(logits, out);
  EXPECT_NEAR(out[0], std::log(0.25), 1e-6);
  EXPECT_NEAR(out[1], std::log(0.75), 1e-6);
}

TEST(Perplexity, WindowTokens) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(perplexity_window_tokens(tokens, 4), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// context 4: one scored row per window (positions 2 predicts 3); two windows, vocabulary 2.
TEST(Perplexity, KldRoundTripAndStatistics) {
  Scratch dir;
  const std::string path = dir.path + "/base.kld";
  const std::vector<int32_t> tokens = {0, 1, 0, 1, 1, 0, 1, 0};
  auto w = KldWriter::create(path, 2, 4, tokens);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  // Base rows: p = (0.5, 0.5) and p = (0.25, 0.75).
  ASSERT_TRUE((*w)->add(std::vector<float>{0.0f, 0.0f}).is_ok());
  ASSERT_TRUE((*w)->add(std::vector<float>{0.0f, std::log(3.0f)}).is_ok());
  EXPECT_FALSE((*w)->add(std::vector<float>{0.0f, 0.0f}).is_ok());  // one row too many
  ASSERT_TRUE((*w)->finish().is_ok());
  EXPECT_EQ(fs::file_size(path), 8u + 12u + 8u * 4u + 2u * 2u * 4u);

  auto base = KldBase::open(path);
  ASSERT_TRUE(base.is_ok()) << base.status().to_string();
  EXPECT_EQ(base->n_rows(), 2);
  EXPECT_TRUE(check_kld_base_matches(*base, tokens, 4, 2).is_ok());
  EXPECT_FALSE(check_kld_base_matches(*base, tokens, 4, 3).is_ok());
  std::vector<int32_t> other = tokens;
  other[5] = 1;
  EXPECT_FALSE(check_kld_base_matches(*base, other, 4, 2).is_ok());

  // This run: p = (0.5, 0.5) (KL 0, same top... both ties pick index 0), then p = (0.75, 0.25):
  // KL = 0.25 ln(0.25/0.75) + 0.75 ln(0.75/0.25) = 0.5 ln 3; targets 1 and 0.
  KlAccumulator kl(*base);
  ASSERT_TRUE(kl.add(std::vector<float>{0.0f, 0.0f}, 1).is_ok());
  ASSERT_TRUE(kl.add(std::vector<float>{std::log(3.0f), 0.0f}, 0).is_ok());
  EXPECT_FALSE(kl.add(std::vector<float>{0.0f, 0.0f}, 0).is_ok());  // past the base's rows
  const KlSummary s = kl.summary();
  EXPECT_EQ(s.count, 2);
  const double k2 = 0.5 * std::log(3.0);
  EXPECT_NEAR(s.kld_mean, k2 / 2, 1e-6);
  EXPECT_NEAR(s.kld_max, k2, 1e-6);
  EXPECT_NEAR(s.kld_median, k2 / 2, 1e-6);
  EXPECT_NEAR(s.kld_p99, 0.99 * k2, 1e-6);
  EXPECT_NEAR(s.top1_agreement, 0.5, 1e-12);
  // Δp: 0.5 - 0.5 = 0 for the first; p(0) 0.75 - 0.25 = 0.5 for the second.
  EXPECT_NEAR(s.dp_mean, 0.25, 1e-6);
  EXPECT_NEAR(s.dp_rms, std::sqrt(0.125), 1e-6);
  // Base PPL over targets with p = 0.5 and 0.25: exp(-(ln 0.5 + ln 0.25) / 2) = sqrt(8).
  EXPECT_NEAR(s.ppl_base, std::sqrt(8.0), 1e-5);
}

TEST(Perplexity, KldReadErrors) {
  Scratch dir;
  const std::string path = dir.path + "/b.kld";
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  write("NOTAKLD!" + std::string(12, '\0'));
  EXPECT_EQ(KldBase::open(path).status().code(), StatusCode::kParseError);
  {
    const std::vector<int32_t> tokens(8, 0);
    auto w = KldWriter::create(path, 2, 4, tokens);
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE((*w)->add(std::vector<float>{0, 0}).is_ok());
    ASSERT_TRUE((*w)->add(std::vector<float>{0, 0}).is_ok());
    ASSERT_TRUE((*w)->finish().is_ok());
  }
  fs::resize_file(path, fs::file_size(path) - 1);  // truncated
  auto b = KldBase::open(path);
  EXPECT_EQ(b.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(b.status().message().find("implies"), std::string::npos);
  // A header claiming an enormous vocabulary is refused before anything is read.
  std::string huge = "DAY0KLD1";
  const uint32_t header[3] = {0xffffffffu, 4, 1};
  huge.append(reinterpret_cast<const char*>(header), sizeof header);
  write(huge);
  EXPECT_EQ(KldBase::open(path).status().code(), StatusCode::kParseError);
  // An unfinished writer leaves nothing behind.
  {
    const std::vector<int32_t> tokens(8, 0);
    auto w = KldWriter::create(dir.path + "/partial.kld", 2, 4, tokens);
    ASSERT_TRUE(w.is_ok());
    EXPECT_FALSE((*w)->finish().is_ok());
  }
  EXPECT_FALSE(fs::exists(dir.path + "/partial.kld"));
}

}  // namespace
}  // namespace day0
