// The bounded JSON reading path: depth, size and number range checked without recursion, with the
// source and key path in every message.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmath>

#include <filesystem>
#include <fstream>
#include <string>

#include "day0/core/atomic_file.h"
#include "day0/core/json_reader.h"

namespace day0 {
namespace {

TEST(JsonReader, DepthIsCheckedWithoutRecursion) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  const Status st = check_json_text(deep, "deep.json");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("deep.json"), std::string::npos);
  EXPECT_NE(st.message().find("nesting deeper than 64"), std::string::npos) << st.message();
  EXPECT_TRUE(check_json_text(std::string(64, '[') + std::string(64, ']'), "ok.json").is_ok());
  // Brackets inside strings (also after escaped quotes) do not count.
  EXPECT_TRUE(check_json_text(R"({"a": "[[[[\"[[[[", "b": [1]})", "s.json", {1024, 2}).is_ok());
}

TEST(JsonReader, NumberRangeNamesTheKeyPath) {
  auto r = parse_json_text(R"({"rope_scaling": {"factor": 1e400}})", "config.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("config.json: rope_scaling.factor"), std::string::npos)
      << r.status().message();
  r = parse_json_text(R"({"a": [1, 2, {"b": -1e999}]})", "x.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("a[2].b"), std::string::npos) << r.status().message();
  // Underflow is fine (it is 0), as in every JSON reader.
  EXPECT_TRUE(parse_json_text(R"({"eps": 1e-400})", "x.json").is_ok());
}

TEST(JsonReader, PythonsInfinityTokensBecomeInfiniteDoubles) {
  // What Python's json writes for float('inf') (transformers' Nemotron-H time_step_limit); inside a
  // string the word stays text.
  auto j = parse_json_text(R"({"limit": [0.0, Infinity], "low": -Infinity, "name": "Infinity x"})", "c");
  ASSERT_TRUE(j.is_ok()) << j.status().message();
  EXPECT_EQ((*j)["limit"][0].get<double>(), 0.0);
  EXPECT_TRUE(std::isinf((*j)["limit"][1].get<double>()) && (*j)["limit"][1].get<double>() > 0);
  EXPECT_TRUE(std::isinf((*j)["low"].get<double>()) && (*j)["low"].get<double>() < 0);
  EXPECT_EQ((*j)["name"], "Infinity x");
  EXPECT_FALSE(parse_json_text(R"({"a": Infinit})", "c").is_ok());
}

TEST(JsonReader, SizeCapAndSyntaxErrorsAreBadInput) {
  EXPECT_EQ(check_json_text(std::string(100, ' '), "x", {50, 8}).code(), StatusCode::kOutOfRange);
  const auto r = parse_json_text("{\"a\": }", "bad.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kParseError);
  EXPECT_NE(r.status().message().find("bad.json"), std::string::npos);
}

TEST(JsonReader, FilesMustBeRegularAndBounded) {
  EXPECT_EQ(read_bounded_file("/dev/zero", 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_bounded_file("/tmp", 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_bounded_file("/no/such/file", 1 << 20).status().code(), StatusCode::kNotFound);
  const auto path =
      std::filesystem::temp_directory_path() / (std::string("day0_json_reader_") + std::to_string(getpid()));
  std::ofstream(path) << "{\"a\": 1}";
  EXPECT_EQ(read_bounded_file(path, 4).status().code(), StatusCode::kOutOfRange);
  auto j = read_json_file(path);
  ASSERT_TRUE(j.is_ok()) << j.status().to_string();
  EXPECT_EQ((*j)["a"], 1);
  std::filesystem::remove(path);
}

TEST(JsonReader, ExcerptIsBounded) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 100; ++i) deep = nlohmann::json::array({deep, i});
  const std::string e = json_excerpt(deep, 60);
  EXPECT_LE(e.size(), 60u);
  EXPECT_EQ(e, "[[...], 99]");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(1000, 'x')), 60).size(), 42u);
}

TEST(TempFiles, StaleTempsOfDeadRunsAreRemovedAndLiveOnesKept) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (std::string("day0_stale_") + std::to_string(getpid()));
  fs::create_directories(dir);
  // A pid that certainly ran and ended: a child we reaped.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  int status = 0;
  waitpid(dead, &status, 0);
  const fs::path stale_dir = dir / (std::string(".out.tmp-") + std::to_string(dead) + "-abc");
  const fs::path stale_file = dir / (std::string(".report.json.tmp-") + std::to_string(dead) + "-xyz");
  const fs::path live = dir / (std::string(".out.tmp-") + std::to_string(getppid()) + "-abc");
  fs::create_directories(stale_dir / "inner");
  std::ofstream(stale_file) << "partial";
  fs::create_directories(live);
  EXPECT_EQ(remove_stale_temps(dir), 2);
  EXPECT_FALSE(fs::exists(stale_dir));
  EXPECT_FALSE(fs::exists(stale_file));
  EXPECT_TRUE(fs::exists(live));
  fs::remove_all(dir);
}

TEST(TempFiles, TempDirIsRemovedUnlessCommitted) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::temp_directory_path();
  fs::path seen;
  {
    auto t = TempDir::create(parent, "day0-test");
    ASSERT_TRUE(t.is_ok());
    seen = t->path();
    std::ofstream(seen / "f") << "x";
    EXPECT_NE(seen.filename().string().find(std::string(".day0-test.tmp-") + std::to_string(getpid()) + "-"),
              std::string::npos);
  }
  EXPECT_FALSE(fs::exists(seen));
  const fs::path target = parent / (std::string("day0_commit_") + std::to_string(getpid()));
  {
    auto t = TempDir::create(parent, "day0-test");
    ASSERT_TRUE(t.is_ok());
    std::ofstream(t->path() / "f") << "x";
    ASSERT_TRUE(t->commit_to(target).is_ok());
  }
  EXPECT_TRUE(fs::exists(target / "f"));
  fs::remove_all(target);
}

TEST(TempFiles, AtomicWriteLeavesNoTemporary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (std::string("day0_atomic_") + std::to_string(getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(write_file_atomic((dir / "a.txt").string(), "hello").is_ok());
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "a.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace day0
