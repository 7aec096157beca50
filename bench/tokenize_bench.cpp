// Encoding throughput (MB/s, one thread) of day0's tokenizers on a multi-MB mixed-language text built
// deterministically from the shared test texts. The text is also written to
// $DAY0_TOKENIZE_CORPUS (default: tokenize_corpus.txt in the working directory) so that
// tools/bench/tokenize_hf.py can time Hugging Face `tokenizers` on the very same bytes.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "day0/tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using day0::tokenizer::Tokenizer;

fs::path tokenizers_dir() {
  return fs::path(DAY0_SOURCE_DIR) / ".." / "shared" / "tokenizers";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every "text" of every vectors file, shuffled with a fixed seed and repeated to at least 4 MiB.
const std::string& corpus() {
  static const std::string text = [] {
    std::vector<std::string> pieces;
    std::vector<fs::path> files;
    for (const auto& model : fs::directory_iterator(tokenizers_dir())) {
      for (const char* name : {"vectors.jsonl", "o200k_harmony_vectors.jsonl"}) {
        if (fs::exists(model.path() / "tests" / name)) files.push_back(model.path() / "tests" / name);
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::istringstream in(slurp(f));
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty()) continue;
        const std::string t = nlohmann::json::parse(line)["text"].get<std::string>();
        // Special-token strings would be matched as single tokens; keep the benchmark on plain text.
        if (!t.empty() && t.find("<|") == std::string::npos && t.find("[INST]") == std::string::npos)
          pieces.push_back(t);
      }
    }
    std::string out;
    std::mt19937 rng(20240726);
    while (!pieces.empty() && out.size() < (4u << 20)) {
      std::shuffle(pieces.begin(), pieces.end(), rng);
      for (const auto& p : pieces) {
        out += p;
        out += (rng() % 4 == 0) ? "\n" : " ";
      }
    }
    const char* dest = std::getenv("DAY0_TOKENIZE_CORPUS");
    std::ofstream(dest ? dest : "tokenize_corpus.txt", std::ios::binary) << out;
    return out;
  }();
  return text;
}

std::shared_ptr<const Tokenizer> load(const std::string& model) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto& slot = cache[model];
  if (!slot) {
    auto t = day0::tokenizer::load_tokenizer(tokenizers_dir() / model);
    if (t.is_ok()) slot = *t;
  }
  return slot;
}

void BM_Encode(benchmark::State& state, const std::string& model) {
  auto tok = load(model);
  if (!tok) {
    state.SkipWithError(("cannot load shared/tokenizers/" + model).c_str());
    return;
  }
  const std::string& text = corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["MB"] = static_cast<double>(text.size()) / 1e6;
}

// One encode() per line (the "\n" kept), as a server encodes separate prompts.
void BM_EncodeLines(benchmark::State& state, const std::string& model) {
  auto tok = load(model);
  if (!tok) {
    state.SkipWithError(("cannot load shared/tokenizers/" + model).c_str());
    return;
  }
  const std::string& text = corpus();
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    nl = nl == std::string::npos ? text.size() : nl + 1;
    lines.emplace_back(text.data() + pos, nl - pos);
    pos = nl;
  }
  for (auto _ : state) {
    for (std::string_view line : lines) {
      auto ids = tok->encode(line);
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
}

BENCHMARK_CAPTURE(BM_EncodeLines, llama3, std::string("llama-3"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeLines, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeLines, deepseek_v3, std::string("deepseek-v3"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeLines, mistral_v03, std::string("mistral-7b-instruct-v0.3"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeLines, gpt_oss, std::string("gpt-oss"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

BENCHMARK_CAPTURE(BM_Encode, llama3, std::string("llama-3"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, deepseek_v3, std::string("deepseek-v3"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, mistral_v03, std::string("mistral-7b-instruct-v0.3"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, gpt_oss, std::string("gpt-oss"))->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Encode, kimi_k2, std::string("kimi-k2"))->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
