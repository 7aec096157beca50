// Every chat-template rendering in shared/tokenizers/*/tests/chat_template.*.expected.json, exactly, and
// every case the reference raised on fails here too.
#include <gtest/gtest.h>

#include <ctime>

#include "day0/tokenizer/chat_template.h"
#include "tokenizer/tokenizer_test_util.h"

namespace day0::testing {
namespace {

using ojson = nlohmann::ordered_json;

// The expected files were rendered with strftime_now pinned to 2024-07-26 12:00.
std::time_t pinned_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

std::vector<std::filesystem::path> expected_files() {
  std::vector<std::filesystem::path> out;
  const auto root = shared_tokenizers_dir();
  if (root.empty()) return out;
  for (const auto& model : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::is_directory(model.path() / "tests")) continue;
    for (const auto& f : std::filesystem::directory_iterator(model.path() / "tests")) {
      const std::string name = f.path().filename().string();
      if (name.rfind("chat_template.", 0) == 0 && name.size() > 14) out.push_back(f.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ChatTemplates, AllSharedRenderingsMatchExactly) {
  D0_SKIP_WITHOUT_SHARED();
  const auto files = expected_files();
  ASSERT_GE(files.size(), 15u);
  size_t rendered = 0, raised = 0;
  for (const auto& file : files) {
    const ojson spec = ojson::parse(read_file(file));
    const auto model_dir = file.parent_path().parent_path();
    const std::string template_rel = spec["template"].get<std::string>();
    const std::string source = read_file(model_dir / template_rel);
    ASSERT_FALSE(source.empty()) << file;
    const ojson& specials = spec["special_tokens"];
    for (const ojson& c : spec["cases"]) {
      tokenizer::ChatRequest req;
      req.messages = c["messages"];
      req.tools = c["tools"];
      req.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      req.extra = c["extra_kwargs"];
      req.now = pinned_now();
      const std::string where = file.filename().string() + " / " + c["name"].get<std::string>();
      auto out = tokenizer::render_chat_template(source, req, specials, template_rel);
      if (c.contains("error")) {
        EXPECT_FALSE(out.is_ok()) << where << " should raise like the reference: " << c["error"];
        ++raised;
        continue;
      }
      EXPECT_TRUE(out.is_ok()) << where << ": " << out.status().to_string();
      if (out.is_ok()) {
        EXPECT_EQ(*out, c["expected"].get<std::string>()) << where;
      }
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 140u);
  EXPECT_GE(raised, 5u);
}

}  // namespace
}  // namespace day0::testing
