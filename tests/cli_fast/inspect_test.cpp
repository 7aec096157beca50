// day0 inspect end to end: catalog names, folders, JSON output and every bad-input path (exit 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

std::string write_config(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/config.json";
  std::ofstream(path) << text;
  return path;
}

TEST(Inspect, CatalogModelHumanReport) {
  CliResult r = run_cli({"inspect", "deepseek-v3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("671,026,419,200"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MLA"), std::string::npos);
  EXPECT_NE(r.out.find("70,272 B"), std::string::npos);  // KV cache per token, 61 layers x 576 x 2 B
  EXPECT_NE(r.out.find("KV cache (BF16;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mla_attention"), std::string::npos);
}

// The MTP module is counted apart: Qwen3.5-35B-A3B's one layer (mtp.*) is fc 2048 x 4096, three norms and a
// gated attention layer with the 256-expert MoE, 844,640,768 parameters; the total leaves it out.
TEST(Inspect, MtpLayersAreCountedApart) {
  CliResult r = run_cli({"inspect", "qwen3.5-35b-a3b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 multi-token-prediction layer(s) stored as mtp.* (844.64 M parameters)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("34,660,610,688"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recurrent state per sequence (30 layers, fixed)"), std::string::npos) << r.out;
}

// A hybrid's recurrent state beside the KV bytes, in inspect and plan, text and JSON: Qwen3.5-35B-A3B's
// 30 Gated DeltaNet layers keep 32 x 128 x 128 float32 state and a 3-row BF16 conv window of 8,192
// channels each (2,146,304 B a layer), and a running sequence holds it twice (live + snapshot).
TEST(Inspect, AHybridsStateIsCountedBesideTheKvBytesInInspectAndPlan) {
  CliResult text = run_cli({"inspect", "qwen3.5-35b-a3b"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("64,389,120 B"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("recurrent state per running sequence (live + snapshot)"), std::string::npos);
  EXPECT_NE(text.out.find("128,778,240 B"), std::string::npos) << text.out;
  CliResult json = run_cli({"inspect", "qwen3.5-35b-a3b", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["kv_cache"]["state_bytes_per_sequence"].get<int64_t>(), 64'389'120);
  EXPECT_EQ(j["kv_cache"]["state_bytes_per_running_sequence"].get<int64_t>(), 128'778'240);
  EXPECT_EQ(j["kv_cache"]["state_layers"].get<int64_t>(), 30);
  CliResult plan = run_cli({"plan", "qwen3.5-35b-a3b", "--cluster", "8xH200", "--top", "1"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("state      64,389,120 bytes a sequence"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("128,778,240 a running sequence"), std::string::npos) << plan.out;
  CliResult plan_json = run_cli({"plan", "qwen3.5-35b-a3b", "--cluster", "8xH200", "--top", "1", "--json"});
  ASSERT_EQ(plan_json.exit_code, 0) << plan_json.err;
  const auto p = nlohmann::json::parse(plan_json.out);
  EXPECT_EQ(p["model"]["state_bytes_per_sequence"].get<double>(), 64'389'120.0);
  EXPECT_EQ(p["model"]["state_bytes_per_running_sequence"].get<double>(), 128'778'240.0);
}

TEST(Inspect, JsonHasEverything) {
  CliResult r = run_cli({"inspect", "kimi-k2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"]["total"].get<int64_t>(), 1'026'408'232'448);
  EXPECT_EQ(j["spec"]["model_type"], "kimi_k2");
  EXPECT_EQ(j["kv_cache"]["bytes_per_token"].get<int64_t>(), 70'272);
  EXPECT_EQ(j["kv_cache"]["dtype"], "bf16");
  EXPECT_EQ(j["weight_memory"].size(), 6u);
  // --kv-dtype changes the figures the engine's pool would hold: fp8 halves bf16, f32 doubles it.
  for (auto [dtype, bytes] : {std::pair{"fp8", 35'136}, std::pair{"f32", 140'544}}) {
    CliResult k = run_cli({"inspect", "kimi-k2", "--json", "--kv-dtype", dtype});
    ASSERT_EQ(k.exit_code, 0) << k.err;
    const auto jk = nlohmann::json::parse(k.out);
    EXPECT_EQ(jk["kv_cache"]["dtype"], dtype);
    EXPECT_EQ(jk["kv_cache"]["bytes_per_token"].get<int64_t>(), bytes) << dtype;
  }
  EXPECT_EQ(run_cli({"inspect", "kimi-k2", "--kv-dtype", "int3"}).exit_code, 2);
  EXPECT_GT(j["ops"]["list"].size(), 10u);
}

TEST(Inspect, FolderAndFileGiveTheSameCounts) {
  const std::string dir = make_temp_dir("day0_inspect");
  write_config(dir, R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16})");
  CliResult by_folder = run_cli({"inspect", dir, "--json"});
  CliResult by_file = run_cli({"inspect", dir + "/config.json", "--json"});
  std::filesystem::remove_all(dir);
  ASSERT_EQ(by_folder.exit_code, 0) << by_folder.err;
  ASSERT_EQ(by_file.exit_code, 0) << by_file.err;
  const auto a = nlohmann::json::parse(by_folder.out);
  const auto b = nlohmann::json::parse(by_file.out);
  EXPECT_EQ(a["params"], b["params"]);
  // embed 6400 + lm_head 6400 + norm 64 + 2 layers x (q 4096 + k 2048 + v 2048 + o 4096 + q/k norms 32
  // + 2 norms 128 + mlp 3 x 6144)
  EXPECT_EQ(a["params"]["total"].get<int64_t>(),
            6400 + 6400 + 64 + 2 * (4096 + 2048 + 2048 + 4096 + 32 + 128 + 18432));
}

struct BadCase {
  const char* name;
  const char* config;  // nullptr: the path does not exist
  const char* message;
};

TEST(Inspect, BadInputExitsTwoWithAClearMessage) {
  const BadCase cases[] = {
      {"malformed", "{\"vocab_size\": 1,", "malformed JSON"},
      {"missing", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10})", "hidden_size"},
      {"wrong type", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": "ten"})", "vocab_size"},
      {"unknown arch", R"({"architectures": ["FooForCausalLM"]})", "FooForCausalLM"},
      {"negative", R"({"architectures": ["LlamaForCausalLM"], "vocab_size": -1})", "vocab_size"},
      {"overflow", R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
         "intermediate_size": 8, "moe_intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
         "kv_lora_rank": 4, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4,
         "n_routed_experts": 1000000000000000, "num_experts_per_tok": 1})",
       "n_routed_experts"},
      {"unreadable", nullptr, "no such file"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = make_temp_dir("day0_inspect_bad");
    const std::string path = c.config ? write_config(dir, c.config) : dir + "/absent/config.json";
    CliResult r = run_cli({"inspect", path});
    std::filesystem::remove_all(dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("day0 inspect: error"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(Inspect, UnknownCatalogNameSuggestsNearest) {
  CliResult r = run_cli({"inspect", "kimi-k3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nearest: kimi-k2"), std::string::npos) << r.err;
}

TEST(Inspect, HelpAndMissingArgument) {
  CliResult help = run_cli({"inspect", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--json"), std::string::npos);
  CliResult missing = run_cli({"inspect"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("MODEL is required"), std::string::npos) << missing.err;
  CliResult both = run_cli({"inspect", "llama-3.1-8b", "--families"});
  EXPECT_EQ(both.exit_code, 2);
}

// The README's table of supported families is the output of `day0 inspect --families`, verbatim, between
// its two markers: a family added without regenerating the README fails here.
TEST(InspectFamilies, ReadmeTableIsTheCommandsOutput) {
  CliResult r = run_cli({"inspect", "--families"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(std::string(DAY0_TEST_DATA_DIR) + "/../README.md");
  ASSERT_TRUE(in) << "README.md not found beside tests/";
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string begin = "<!-- day0 inspect --families -->\n",
                    end = "<!-- end of day0 inspect --families -->";
  const size_t from = readme.find(begin), to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "README.md lacks the marker " << begin;
  ASSERT_NE(to, std::string::npos) << "README.md lacks the marker " << end;
  EXPECT_EQ(readme.substr(from + begin.size(), to - from - begin.size()), r.out)
      << "regenerate the README's table with `day0 inspect --families`";
}

TEST(InspectFamilies, JsonListsEveryFamilyOnceWithItsNames) {
  CliResult r = run_cli({"inspect", "--families", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_GE(j.size(), 16u);
  std::vector<std::string> order;
  for (const auto& family : j) {
    order.push_back(family["family"].get<std::string>());
    EXPECT_EQ(family["model_types"][0], family["family"]);
    EXPECT_FALSE(family["architectures"].empty());
    EXPECT_FALSE(family["summary"].get<std::string>().empty());
  }
  const std::set<std::string> names(order.begin(), order.end());
  EXPECT_EQ(names.size(), order.size()) << "a family is listed twice";
  EXPECT_TRUE(names.count("deepseek_v3"));
  EXPECT_TRUE(names.count("qwen3_next"));
  // Sorted by name, so the table does not change with the link order.
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
}

}  // namespace
}  // namespace day0::testing
