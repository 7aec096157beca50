// `day0 convert` and `day0 perplexity` end to end on a tiny hand-built Llama GGUF, as a user runs
// them: the written folder, the refusals (exit 2 naming the file), and a perplexity run whose saved
// log-probabilities, read back as the KL base of the same model, give zero divergence.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "gguf/gguf_builder.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

// Small deterministic weights (|w| < 0.5) so the logits stay in a sensible range.
std::vector<float> waves(uint64_t rows, uint64_t cols, float phase) {
  std::vector<float> v;
  for (uint64_t i = 0; i < rows * cols; ++i)
    v.push_back(0.45f * std::sin(0.7f * static_cast<float>(i) + phase));
  return v;
}

GgufBuilder tiny_llama() {
  return tiny_llama_gguf([](uint64_t rows, uint64_t cols, int index) {
    return waves(rows, cols, 0.1f * static_cast<float>(index + 1));
  });
}

class GgufCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("day0_gguf_cli_");
    gguf_ = dir_ + "/tiny.gguf";
    tiny_llama().write(gguf_);
    text_ = dir_ + "/text.txt";
    std::ofstream(text_) << " ab ab b ab a ab ab b ab ab a ab ab ab b ab";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Every run gets a private conversion cache, so no test reads another's.
  CliResult day0(const std::vector<std::string>& args) {
    return run_cli_bounded(args, 60, 0, 0, {"DAY0_CACHE_DIR=" + dir_ + "/cache"});
  }
  std::string dir_, gguf_, text_;
};

TEST_F(GgufCli, ConvertWritesALoadableFolderAndRefusesToOverwrite) {
  const std::string out = dir_ + "/hf";
  CliResult r = day0({"convert", gguf_, "--out", out, "--dtype", "f32", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(out) / f)) << f;
  }
  r = day0({"inspect", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.dump().find("LlamaForCausalLM") != std::string::npos, true) << r.out.substr(0, 400);

  // A second convert over the written folder: usage error, the folder untouched, no temp left.
  const auto before = fs::last_write_time(fs::path(out) / "model.safetensors");
  r = day0({"convert", gguf_, "--out", out, "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(out), std::string::npos) << r.err;
  EXPECT_EQ(fs::last_write_time(fs::path(out) / "model.safetensors"), before);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    entries += e.path().filename().string()[0] == '.' ? 1 : 0;
  EXPECT_EQ(entries, 0) << "a hidden temp or lock file was left in " << dir_;
}

TEST_F(GgufCli, BadGgufInputIsAUsageErrorNamingTheFile) {
  // Truncated inside the tensor data.
  std::vector<uint8_t> bytes = tiny_llama().bytes();
  const std::string cut = dir_ + "/cut.gguf";
  std::ofstream(cut, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() - 100));
  CliResult r = day0({"convert", cut, "--out", dir_ + "/hf_cut", "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cut.gguf"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ + "/hf_cut"));
  r = day0({"inspect", cut});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cut.gguf"), std::string::npos) << r.err;

  // Not a GGUF at all.
  const std::string fake = dir_ + "/fake.gguf";
  std::ofstream(fake) << "{\"not\": \"gguf\"}";
  r = day0({"convert", fake, "--out", dir_ + "/hf_fake", "--quiet"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("fake.gguf"), std::string::npos) << r.err;
}

TEST_F(GgufCli, PerplexityOfTheSameModelAgainstItsOwnSavedRunHasZeroDivergence) {
  const std::string base = dir_ + "/base.kld";
  CliResult r =
      day0({"perplexity", gguf_, "--file", text_, "--context", "8", "--save-logits", base, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto first = nlohmann::json::parse(r.out);
  const double ppl = first["ppl"].get<double>();
  EXPECT_TRUE(std::isfinite(ppl));
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 6.0 * 6.0);  // a 6-token vocabulary: far above chance would mean broken scoring
  EXPECT_EQ(first["windows"].get<int64_t>(), first["tokens"].get<int64_t>() / 8);
  // llama-perplexity scores positions N/2 .. N-2 of each window (each predicting the next token).
  EXPECT_EQ(first["scored_tokens"].get<int64_t>(), first["windows"].get<int64_t>() * 3);
  ASSERT_TRUE(fs::is_regular_file(base));

  r = day0({"perplexity", gguf_, "--file", text_, "--context", "8", "--kl-base", base, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto second = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(second["ppl"].get<double>(), ppl);
  EXPECT_NEAR(second["kl"]["kld_mean"].get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(second["kl"]["kld_max"].get<double>(), 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(second["kl"]["same_top1"].get<double>(), 1.0);
  EXPECT_NEAR(second["kl"]["ppl_base"].get<double>(), ppl, 1e-9 * ppl);

  // The base was saved with another context: refused, naming the base file.
  r = day0({"perplexity", gguf_, "--file", text_, "--context", "4", "--kl-base", base});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("base.kld"), std::string::npos) << r.err;

  // A text shorter than two windows cannot be scored.
  r = day0({"perplexity", gguf_, "--file", text_, "--context", "32"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// What a killed convert left (a hidden staging folder named with its dead pid) goes with the next run
// into the same folder; the written folder is as readable as mkdir makes one.
TEST_F(GgufCli, ConvertSweepsTheStagingFolderOfAKilledRun) {
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  int status = 0;
  waitpid(dead, &status, 0);
  const fs::path stale = fs::path(dir_) / (".hf.tmp-" + std::to_string(dead) + "-ABCDEF");
  fs::create_directories(stale);
  std::ofstream(stale / "model.safetensors") << "partial";
  CliResult r = day0({"convert", gguf_, "--out", dir_ + "/hf", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale)) << "the dead run's staging folder is still there";
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left: " << e.path();
  const fs::perms p = fs::status(dir_ + "/hf").permissions();
  EXPECT_NE(p & fs::perms::others_read, fs::perms::none) << "the folder kept mkdtemp's 0700";
}

}  // namespace
}  // namespace day0::testing
