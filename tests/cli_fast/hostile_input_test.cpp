// The CLI contract over a corpus of hostile inputs, for every subcommand: bad input is exit 2 with a
// message naming the file (and key path where there is one); 3 is only for internal errors; never a
// signal, never a hang. Every case runs under a time limit. These cases are quick, so they also run
// in the sanitizer build (the slow end-to-end cases live in tests/cli).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string golden_llama() {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";
}

// Overwrites `bytes` at the start of the data of tensor `name` (or of the first tensor of `dtype`)
// in a safetensors file.
std::string poke_tensor(const fs::path& file, const std::string& dtype, const std::vector<uint8_t>& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const auto j = nlohmann::json::parse(header);
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__" || entry["dtype"] != dtype) continue;
    const uint64_t begin = entry["data_offsets"][0].get<uint64_t>();
    f.seekp(static_cast<std::streamoff>(8 + n + begin + 7 * bytes.size()));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return name;
  }
  return {};
}

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("day0_hostile_"));
    const fs::path d(*dir_);
    write_file(d / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
    write_file(d / "big_number.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 1e400})");
    auto config = nlohmann::json::parse(read_file(golden_llama() + "/config.json"));
    std::string text = config.dump();
    text.insert(text.size() - 1, R"(, "rope_scaling": {"rope_type": "linear", "factor": -1e400})");
    fs::create_directories(d / "rope_model");
    write_file(d / "rope_model/config.json", text);
    write_file(d / "empty.json", "");
    write_file(d / "garbage.json", std::string("\x00\xff\xfe{{{\x01", 8));
    {
      std::ofstream huge(d / "huge.json");
      huge << "{";
    }
    fs::resize_file(d / "huge.json", 20u << 20);  // 20 MiB, above the config cap, sparse
    write_file(d / "cluster_deep.json", std::string(5000, '[') + std::string(5000, ']'));
    write_file(d / "cluster_number.json", R"({"nodes": 1e999, "devices_per_node": 8})");
    write_file(d / "chat_deep.json", R"([{"role": "user", "content": )" + std::string(100000, '[') +
                                         std::string(100000, ']') + "}]");
    write_file(d / "chat_number.json", R"([{"role": "user", "content": "hi", "weight": 1e400}])");
    write_file(d / "chat.json", R"([{"role": "user", "content": "hi"}])");
    fs::create_directories(d / "no_config");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }

  // Runs day0 under a time limit and checks the contract: the given exit code, no signal, no hang,
  // and every `needles` substring in stderr + stdout.
  static CliResult expect_exit(const std::vector<std::string>& args, int code,
                               const std::vector<std::string>& needles = {}, double seconds = 60) {
    CliResult r = run_cli_bounded(args, seconds);
    std::string shown;
    for (const auto& a : args) shown += (a.size() > 80 ? a.substr(0, 80) + "..." : a) + " ";
    EXPECT_FALSE(r.timed_out) << "hung: day0 " << shown;
    EXPECT_LT(r.exit_code, 128) << "killed by signal " << r.exit_code - 128 << ": day0 " << shown << "\n"
                                << r.err.substr(0, 2000);
    EXPECT_EQ(r.exit_code, code) << "day0 " << shown << "\n" << r.err.substr(0, 2000);
    for (const auto& n : needles) {
      EXPECT_NE((r.err + r.out).find(n), std::string::npos)
          << "day0 " << shown << ": expected '" << n << "' in\n"
          << r.err.substr(0, 2000);
    }
    return r;
  }
  static std::string* dir_;
};
std::string* Hostile::dir_ = nullptr;

TEST_F(Hostile, InspectRefusesHostileConfigs) {
  // A deeply nested config crashed with SIGSEGV (a recursive dump() in the error message).
  expect_exit({"inspect", path("deep.json")}, 2, {"deep.json", "nesting deeper"});
  // A 1e400 literal was exit 3 "internal error" with no file named.
  expect_exit({"inspect", path("big_number.json")}, 2, {"big_number.json", "hidden_size", "out of range"});
  expect_exit({"inspect", path("rope_model")}, 2, {"config.json", "rope_scaling.factor"});
  expect_exit({"inspect", path("empty.json")}, 2, {"empty.json"});
  expect_exit({"inspect", path("garbage.json")}, 2, {"garbage.json"});
  expect_exit({"inspect", path("huge.json")}, 2, {"huge.json", "limit"});
  expect_exit({"inspect", path("no_config")}, 2);
  // /dev/zero was read without limit.
  expect_exit({"inspect", "/dev/zero"}, 2, {"/dev/zero", "not a regular file"}, 10);
  expect_exit({"inspect", "llama-3.1-8b", "--context", "-1"}, 2);
}

TEST_F(Hostile, PlanRefusesHostileClusterFilesAndOptions) {
  const std::string model = golden_llama();
  expect_exit({"plan", model, "--cluster", path("cluster_deep.json")}, 2, {"cluster_deep.json", "nesting"});
  expect_exit({"plan", model, "--cluster", path("cluster_number.json")}, 2, {"cluster_number.json", "nodes"});
  expect_exit({"plan", model, "--cluster", path("deep.json")}, 2, {"deep.json"});
  expect_exit({"plan", model, "--cluster", "1xCPU", "--top", "0"}, 2);
  expect_exit({"plan", model, "--cluster", "1xCPU", "--reserve", "nan"}, 2, {"--reserve"});
  expect_exit({"plan", model, "--cluster", "1xCPU", "--prefill-chunk", "0"}, 2);
  expect_exit({"plan", model, "--cluster", "1xCPU", "--context", "0"}, 2);
  // A context beyond max_position_embeddings was planned without a word.
  CliResult r = run_cli_bounded({"plan", "llama-3.1-8b", "--cluster", "8xH200", "--context", "16777216"}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("beyond the model's context of 131072"), std::string::npos) << r.err;
}

TEST_F(Hostile, TokenizeRefusesDirectoriesDevicesAndHostileChats) {
  const std::string tok = std::string(DAY0_SHARED_DIR) + "/tokenizers/llama-3";
  if (!fs::exists(tok)) GTEST_SKIP() << "shared tokenizers not found at " << tok;
  // A directory printed empty ids with exit 0.
  expect_exit({"tokenize", tok, "--file", *dir_}, 2, {"is a directory"});
  // The defect was an endless read; 60 s leaves room for loading the Llama-3 tokenizer under the
  // sanitizers on a busy machine.
  expect_exit({"tokenize", tok, "--file", "/dev/zero"}, 2, {"not a regular file"}, 60);
  // A deeply nested value in the messages crashed with SIGSEGV.
  expect_exit({"tokenize", tok, "--chat", path("chat_deep.json")}, 2, {"chat_deep.json", "nesting"});
  expect_exit({"tokenize", tok, "--chat", path("chat_number.json")}, 2, {"chat_number.json", "[0].weight"});
  expect_exit({"tokenize", tok, "--chat", "/dev/zero"}, 2, {"not a regular file"}, 60);
}

TEST_F(Hostile, TemplateArithmeticAndGrowthAreTemplateErrors) {
  const std::string tok = std::string(DAY0_SHARED_DIR) + "/tokenizers/llama-3";
  if (!fs::exists(tok)) GTEST_SKIP() << "shared tokenizers not found at " << tok;
  struct Case {
    std::string source;
    int code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      // SIGFPE on main.
      {"{{ (-9223372036854775807 - 1) // -1 }}", 2, "integer overflow"},
      // Signed overflow (undefined behaviour) on main.
      {"{{ 9223372036854775807 + 1 }}", 2, "integer overflow"},
      {"{{ -9223372036854775807 - 2 }}", 2, "integer overflow"},
      {"{{ 4611686018427387904 * 4 }}", 2, "integer overflow"},
      {"{{ 3 ** 100 }}", 2, "integer overflow"},
      {"{{ -(-9223372036854775807 - 1) }}", 2, "integer overflow"},
      {"{{ (-9223372036854775807 - 1) % -1 }}", 0, ""},
      {"{{ 1e300|int }}", 2, "cannot convert float"},
      // A deep value built at run time, then |tojson: SIGSEGV on main.
      {"{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}"
       "{{ ns.v|tojson }}",
       2, "nested deeper"},
      // A namespace that would contain itself (a cycle never freed: a leak per request in a server).
      {"{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns|tojson }}", 2, "cannot contain itself"},
      {"{% set ns = namespace(a=1) %}{% set ns.me = [1, {'x': ns}] %}{{ ns }}", 2, "cannot contain itself"},
      // str.replace escaped the 64 MiB value cap (3 GB in 36 s on main).
      {"{% set ns = namespace(s='a' * 1000000) %}{% for i in range(30) %}{% set ns.s = ns.s.replace('a', "
       "'aa') %}"
       "{% endfor %}{{ ns.s|length }}",
       2, "larger than 64 MiB"},
      {"{% set s = 'a' * 10000000 %}{{ ([s] * 100)|join('') }}", 2, "larger than 64 MiB"},
      {"{% set s = 'a' * 10000000 %}{{ ','.join([s] * 100) }}", 2, "larger than 64 MiB"},
      {"{% set s = 'a' * 10000000 %}{{ ([s] * 100)|tojson }}", 2, "larger than 64 MiB"},
      {"{% set s = 'a\\n' * 1000000 %}{{ s|indent('x' * 1000) }}", 2, "larger than 64 MiB"},
      // A long string as a list (one value per character): 2.3 GB and 72 s in the fuzzer on main.
      {"{% set s = 'ab' * 16000000 %}{{ s|list|length }}", 2, "larger than 64 MiB"},
      {"{% set s = 'ab' * 16000000 %}{% for c in s %}{% endfor %}", 2, "larger than 64 MiB"},
      {"{{ 'abc'|list|join('-') }}", 0, ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string file = path(std::string("t") + std::to_string(i) + ".jinja");
    write_file(file, cases[i].source);
    std::vector<std::string> needles;
    if (!cases[i].needle.empty()) needles = {cases[i].needle, "1:"};  // line and column
    expect_exit({"tokenize", tok, "--chat", path("chat.json"), "--template", file}, cases[i].code, needles,
                60);
  }
}

TEST_F(Hostile, GzipBombTokenizerIsRefused) {
  const fs::path folder = path("bomb");
  fs::create_directories(folder);
  gzFile gz = gzopen((folder / "tokenizer.json.gz").c_str(), "wb1");
  ASSERT_NE(gz, nullptr);
  const std::string zeros(1 << 20, ' ');
  for (int i = 0; i < 160; ++i) ASSERT_GT(gzwrite(gz, zeros.data(), static_cast<unsigned>(zeros.size())), 0);
  gzclose(gz);
  EXPECT_LT(fs::file_size(folder / "tokenizer.json.gz"), 2u << 20);
  expect_exit({"tokenize", folder.string(), "hello"}, 2, {"inflates to more than"}, 60);
}

TEST_F(Hostile, RunRefusesBadSamplingOptionsAndHostileChats) {
  const std::string model = golden_llama();
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--temperature", "nan"}, 2, {"--temperature"});
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--temperature", "inf"}, 2, {"--temperature"});
  // exit 3 from a kernel check on main.
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--temperature", "1", "--top-p", "0"}, 2, {"--top-p"});
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--top-p", "nan"}, 2, {"--top-p"});
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--max-new", "-1"}, 2);
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--top-k", "-5"}, 2);
  expect_exit({"run", model, "--prompt-ids", "1,2,3", "--logprobs", "1000000"}, 2);
  const std::string tok = std::string(DAY0_SHARED_DIR) + "/tokenizers/llama-3";
  if (fs::exists(tok)) {
    expect_exit({"run", model, "--chat", path("chat_deep.json"), "--tokenizer", tok}, 2, {"chat_deep.json"});
    expect_exit({"run", model, "--chat", path("chat_number.json"), "--tokenizer", tok}, 2,
                {"chat_number.json"});
    expect_exit({"run", model, "--chat", *dir_, "--tokenizer", tok}, 2, {"is a directory"});
  }
}

TEST_F(Hostile, AdaptRefusesBadNumbersAndBadOutBeforeTheFirstStage) {
  // A stage failed (exit 1) on main, or the run was OOM-killed after 24 GB (2000000000).
  expect_exit({"adapt", "--new-tokens", "-1"}, 2, {"--new-tokens"}, 20);
  expect_exit({"adapt", "--new-tokens", "2000000000"}, 2, {"--new-tokens"}, 20);
  expect_exit({"adapt", "--prompt-tokens", "0"}, 2, {"--prompt-tokens"}, 20);
  expect_exit({"adapt", "--soak-requests", "0"}, 2, {"--soak-requests"}, 20);
  expect_exit({"adapt", "--soak-seconds", "nan"}, 2, {"--soak-seconds"}, 20);
  expect_exit({"adapt", "--soak-seconds", "-1"}, 2, {"--soak-seconds"}, 20);
  expect_exit({"adapt", "--soak-max-growth", "inf"}, 2, {"--soak-max-growth"}, 20);
  expect_exit({"adapt", "--margin-throughput", "nan"}, 2, {"--margin-throughput"}, 20);
  // --out was checked only after every stage ran.
  write_file(path("a_file"), "x");
  CliResult r = expect_exit({"adapt", "--out", path("a_file")}, 2, {"not a folder"}, 20);
  EXPECT_EQ(r.err.find("[1/"), std::string::npos) << "a stage ran before --out was checked:\n" << r.err;
  fs::create_directories(path("busy_out"));
  write_file(path("busy_out/notes.txt"), "mine");
  r = expect_exit({"adapt", "--out", path("busy_out")}, 2, {"notes.txt"}, 20);
  EXPECT_EQ(read_file(path("busy_out/notes.txt")), "mine");
  expect_exit({"adapt", "--out", path("no/such/parent")}, 2, {"does not exist"}, 20);
}

TEST_F(Hostile, AlignAndSynthRefuseBadNumbers) {
  const std::string model = golden_llama();
  expect_exit({"align", model, "--against", "reference", "--prompt-ids", "1,2", "--kl-mean", "nan"}, 2,
              {"--kl-mean"});
  expect_exit({"align", model, "--against", "reference", "--prompt-ids", "1,2", "--min-same-top1", "2"}, 2);
  // Absurd sizes were std::bad_alloc, exit 3. Now: a clear error before allocating, nothing left.
  const std::string out = path("absurd");
  CliResult r =
      expect_exit({"synth", "llama-3.1-8b", "--out", out, "--layers", "64", "--hidden", "65536", "--heads",
                   "1024", "--head-dim", "64", "--intermediate", "1048576", "--vocab", "16777216"},
                  2, {"choose smaller sizes"}, 60);
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(*dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".absurd.tmp"), std::string::npos) << e.path();
  }
}

class HostileVerify : public Hostile {
 protected:
  void SetUp() override {
    ckpt_ = make_temp_dir("day0_hostile_verify_");
    fs::copy_file(golden_llama() + "/config.json", ckpt_ + "/config.json");
    fs::copy_file(golden_llama() + "/model.safetensors", ckpt_ + "/model.safetensors");
  }
  void TearDown() override { fs::remove_all(ckpt_); }
  std::string ckpt_;
};

TEST_F(HostileVerify, EmptyHashListIsNotAPass) {
  write_file(ckpt_ + "/EMPTY", "");
  // Said "OK ... hashed against EMPTYFILE" with nothing compared.
  expect_exit({"verify", ckpt_, "--hashes", ckpt_ + "/EMPTY"}, 1, {"nothing was compared"});
  write_file(ckpt_ + "/OTHER", std::string(64, 'a') + "  some-other-file.bin\n");
  expect_exit({"verify", ckpt_, "--hashes", ckpt_ + "/OTHER"}, 1, {"nothing was compared"});
}

TEST_F(HostileVerify, ShardOnDevZeroIsNotHashedForever) {
  fs::remove(ckpt_ + "/model.safetensors");
  fs::create_symlink("/dev/zero", ckpt_ + "/model.safetensors");
  expect_exit({"verify", ckpt_}, 1, {"not a regular file"}, 20);
  expect_exit({"verify", ckpt_, "--values"}, 1, {}, 20);
}

TEST_F(HostileVerify, ValueScanFindsNanInBf16) {
  const std::string tensor = poke_tensor(ckpt_ + "/model.safetensors", "BF16", {0xc0, 0x7f});  // BF16 NaN
  ASSERT_FALSE(tensor.empty());
  // verify said OK: the hash list is what the user has; only the value scan can tell.
  expect_exit({"verify", ckpt_}, 0);
  expect_exit({"verify", ckpt_, "--values"}, 1, {"non_finite_values", tensor, "1 NaN"});
  poke_tensor(ckpt_ + "/model.safetensors", "BF16", {0x80, 0x7f});  // BF16 +Inf
  expect_exit({"verify", ckpt_, "--values"}, 1, {"0 NaN, 1 Inf"});
  poke_tensor(ckpt_ + "/model.safetensors", "BF16", {0x00, 0x7f});  // 1.7e38: finite but absurd
  expect_exit({"verify", ckpt_, "--values"}, 1, {"absurd_magnitude", tensor});
  expect_exit({"verify", ckpt_, "--values", "--no-hash"}, 2, {"--values"});
}

TEST_F(HostileVerify, ValueScanFindsFp8NanCodes) {
  const std::string dir = make_temp_dir("day0_hostile_fp8_");
  CliResult synth = run_cli_bounded({"synth", "deepseek-v3", "--out", dir + "/m"}, 120);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  fs::remove(dir + "/m/SHA256SUMS");
  std::string shard, tensor;
  for (const auto& e : fs::directory_iterator(dir + "/m")) {
    if (e.path().extension() != ".safetensors" || !tensor.empty()) continue;
    tensor = poke_tensor(e.path(), "F8_E4M3", {0x7f});
    shard = e.path().string();
  }
  ASSERT_FALSE(tensor.empty()) << "the deepseek-v3 miniature has no F8_E4M3 tensor";
  expect_exit({"verify", dir + "/m", "--values"}, 1, {"non_finite_values", tensor});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace day0::testing
