// Generation spot checks: the embedded prompt set, the reference file's checks, the greedy comparison
// and the degenerate-output test (the SmolLM2 run against transformers is in tests/trained).
#include "day0/report/spot_check.h"

#include <gtest/gtest.h>

#include "day0/report/render.h"
#include "day0/report/report.h"

#include <set>

namespace day0::report {
namespace {

TEST(SpotPrompts, EmbeddedSetCoversTheThreeKindsWithUniqueIds) {
  const auto& prompts = spot_prompts();
  ASSERT_GE(prompts.size(), 6u);
  std::set<std::string> kinds, ids;
  for (const auto& p : prompts) {
    kinds.insert(p.kind);
    ids.insert(p.id);
    EXPECT_GT(p.max_new_tokens, 0) << p.id;
    ASSERT_FALSE(p.messages.empty()) << p.id;
    EXPECT_EQ(p.messages.back()["role"], "user") << p.id;
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"multilingual", "long-form", "instruction"}));
  EXPECT_EQ(ids.size(), prompts.size());
}

TEST(SpotPrompts, BadPromptSetsNameTheKey) {
  const auto parse = [](const std::string& text) { return parse_spot_prompts(text, "p.json"); };
  const std::string ok_prompt = R"({"id": "a", "kind": "instruction", "max_new_tokens": 4,
                                    "messages": [{"role": "user", "content": "hi"}]})";
  EXPECT_TRUE(parse(R"({"format": "day0-spot-prompts/1", "prompts": [)" + ok_prompt + "]}").is_ok());
  auto wrong_format = parse(R"({"format": "other/1", "prompts": [)" + ok_prompt + "]}");
  ASSERT_FALSE(wrong_format.is_ok());
  EXPECT_NE(wrong_format.status().message().find("day0-spot-prompts/1"), std::string::npos);
  auto twice =
      parse(R"({"format": "day0-spot-prompts/1", "prompts": [)" + ok_prompt + "," + ok_prompt + "]}");
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("repeats prompts[0]"), std::string::npos);
  auto zero =
      parse(R"({"format": "day0-spot-prompts/1", "prompts": [{"id": "a", "kind": "k", "max_new_tokens": 0,
                        "messages": [{"role": "user", "content": "hi"}]}]})");
  ASSERT_FALSE(zero.is_ok());
  EXPECT_NE(zero.status().message().find("max_new_tokens"), std::string::npos);
  auto no_content = parse(R"({"format": "day0-spot-prompts/1", "prompts": [{"id": "a", "kind": "k",
                              "max_new_tokens": 2, "messages": [{"role": "user"}]}]})");
  ASSERT_FALSE(no_content.is_ok());
  EXPECT_NE(no_content.status().message().find("prompts[0].messages[0]"), std::string::npos);
  EXPECT_FALSE(parse(R"({"format": "day0-spot-prompts/1", "prompts": []})").is_ok());
  EXPECT_FALSE(parse("[").is_ok());
}

std::string reference_text(const std::string& prompt_ids, const std::string& greedy_ids, int max_new = 4) {
  return R"({"format": "day0-spot-reference/1", "producer": "transformers", "version": "t", "dtype": "f32",
             "prompts": [{"id": "a", "kind": "instruction", "max_new_tokens": )" +
         std::to_string(max_new) + R"(, "messages": [{"role": "user", "content": "hi"}],
             "prompt_ids": )" +
         prompt_ids + R"(, "greedy_ids": )" + greedy_ids + R"(, "greedy_text": "x"}]})";
}

TEST(SpotReference, ReadsIdsAndChecksThemAgainstTheVocabulary) {
  auto ok = parse_spot_reference(reference_text("[1, 2, 3]", "[4, 5]"), "r.json", 10);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  ASSERT_EQ(ok->entries.size(), 1u);
  EXPECT_EQ(ok->entries[0].prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ok->entries[0].greedy_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ok->dtype, "f32");

  auto past_vocab = parse_spot_reference(reference_text("[1, 10]", "[4]"), "r.json", 10);
  ASSERT_FALSE(past_vocab.is_ok());
  EXPECT_NE(past_vocab.status().message().find("\"prompt_ids\"[1]"), std::string::npos)
      << past_vocab.status().to_string();
  EXPECT_NE(past_vocab.status().message().find("0..9"), std::string::npos);
  auto negative = parse_spot_reference(reference_text("[1]", "[-1]"), "r.json", 0);
  EXPECT_FALSE(negative.is_ok());
  auto too_long = parse_spot_reference(reference_text("[1]", "[1, 2, 3]", 2), "r.json", 10);
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_NE(too_long.status().message().find("at most 2 ids"), std::string::npos);
  auto no_prompt = parse_spot_reference(reference_text("[]", "[1]"), "r.json", 10);
  EXPECT_FALSE(no_prompt.is_ok());
  auto not_ints = parse_spot_reference(reference_text("[1.5]", "[1]"), "r.json", 10);
  EXPECT_FALSE(not_ints.is_ok());
  EXPECT_FALSE(read_spot_reference("/nonexistent/spot.json").is_ok());
}

TEST(GreedyComparison, FindsTheFirstDivergenceAndBothAgreements) {
  const std::vector<int32_t> ref = {1, 2, 3, 4, 5, 6, 7, 8};
  auto same = compare_greedy(ref, ref);
  EXPECT_EQ(same.first_divergence, -1);
  EXPECT_DOUBLE_EQ(same.prefix_agreement, 1.0);
  EXPECT_DOUBLE_EQ(same.token_agreement, 1.0);

  const std::vector<int32_t> diverges = {1, 2, 3, 9, 5, 6, 7, 8};
  auto d = compare_greedy(diverges, ref);
  EXPECT_EQ(d.first_divergence, 3);
  EXPECT_DOUBLE_EQ(d.prefix_agreement, 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(d.token_agreement, 7.0 / 8.0);

  // Ours stopped early (a stop token the reference did not pick): the divergence is where it stopped.
  const std::vector<int32_t> shorter = {1, 2, 3, 4};
  auto s = compare_greedy(shorter, ref);
  EXPECT_EQ(s.first_divergence, 4);
  EXPECT_DOUBLE_EQ(s.prefix_agreement, 0.5);
  EXPECT_DOUBLE_EQ(s.token_agreement, 0.5);
  // Ours ran on past the reference's end.
  const std::vector<int32_t> longer = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto l = compare_greedy(longer, ref);
  EXPECT_EQ(l.first_divergence, 8);
  EXPECT_DOUBLE_EQ(l.prefix_agreement, 1.0);
  EXPECT_DOUBLE_EQ(l.token_agreement, 0.8);

  auto empty_ref = compare_greedy(shorter, {});
  EXPECT_EQ(empty_ref.first_divergence, 0);
  EXPECT_DOUBLE_EQ(empty_ref.prefix_agreement, 0.0);
}

TEST(DegenerateOutput, FlagsOneTokenLoopsOnly) {
  std::vector<int32_t> loop(20, 7);
  loop[3] = 1;
  EXPECT_TRUE(degenerate_output(loop));
  std::vector<int32_t> text;
  for (int i = 0; i < 20; ++i) text.push_back(i % 5);
  EXPECT_FALSE(degenerate_output(text));
  EXPECT_FALSE(degenerate_output(std::vector<int32_t>(10, 7)));  // too short to judge
}

TEST(SpotReport, HtmlShowsTheTextsSideBySideWithTheDivergenceMarked) {
  Report report;
  StageResult stage;
  stage.id = "generation";
  stage.title = "Generation spot checks";
  stage.verdict = Verdict::kPass;
  stage.evidence = nlohmann::json::parse(R"({
    "reference": {"mean_prefix_agreement": 0.5},
    "prompts": [{"id": "instruction-list", "kind": "instruction", "prompt": "List <three> colors",
                 "output": "Red, Blue, Green", "reference": {"text": "Red, Blue, Yellow",
                 "agreed_text": "Red, Blue, ", "first_divergence": 4, "prefix_agreement": 0.5}}]})");
  report.stages.push_back(stage);
  const std::string html = render_html(report);
  EXPECT_NE(html.find("id=\"spot-checks\""), std::string::npos);
  EXPECT_NE(html.find("<th>reference</th>"), std::string::npos);
  EXPECT_EQ(html.find("<th>base model</th>"), std::string::npos);
  EXPECT_NE(html.find("List &lt;three&gt; colors"), std::string::npos);  // escaped
  EXPECT_NE(html.find("Red, Blue, <mark>Green</mark>"), std::string::npos);
  EXPECT_NE(html.find("Red, Blue, <mark>Yellow</mark>"), std::string::npos);
  EXPECT_NE(html.find("first divergence: token 4, agreement 50%"), std::string::npos);
}

}  // namespace
}  // namespace day0::report
