#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "day0/core/atomic_file.h"
#include "day0/report/compare.h"
#include "day0/report/json_schema.h"
#include "day0/report/render.h"
#include "day0/report/report.h"

namespace day0::report {
namespace {

Report sample_report() {
  Report r;
  r.model = "deepseek-v3";
  r.family = "deepseek_v3";
  r.day0_version = "0.1.0";
  r.created_at = "2026-11-30T12:00:00Z";
  r.backend = "cpu";
  StageResult structure{"structure", "Structure", Verdict::kPass, true, "671.03 B params", "", 0.01, {}};
  StageResult weights{"weights", "Weights", Verdict::kSkipped, true, "", "MODEL is a config alone", 0.0, {}};
  StageResult align{"alignment", "Precision alignment", Verdict::kPass, true, "matches", "", 1.5, {}};
  align.evidence = {{"logits_max_abs_err", 1e-5},
                    {"kl_mean", 1e-8},
                    {"top1_agreement", 1.0},
                    {"layers",
                     {{{"layer", 0}, {"cosine", 0.99999}, {"max_abs_err", 1e-6}},
                      {{"layer", 1}, {"cosine", 0.9999}, {"max_abs_err", 3e-6}}}}};
  StageResult perf{"performance", "Performance", Verdict::kPass, true, "", "", 3.0, {}};
  perf.evidence = {{"prefill_tok_s", 200.0}, {"decode_tok_s", 20.0}, {"decode_roofline_tok_s", 25.0}};
  StageResult plan{"plan", "Parallel plan", Verdict::kPass, true, "", "", 0.1, {}};
  plan.evidence = {{"memory_per_device", {{"experts", 60e9}, {"kv_cache", 20e9}}},
                   {"device_memory_bytes", 141e9}};
  r.stages = {structure, weights, align, perf, plan};
  r.skipped_required = skipped_required_stages(r.stages);
  r.verdict = overall_verdict(r.stages, r.regressions);
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Report, JsonRoundTripAndSchema) {
  Report r = sample_report();
  nlohmann::json doc = to_json(r);
  EXPECT_TRUE(validate_json(doc, report_json_schema()).empty());
  auto back = report_from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(to_json(*back), doc);
}

TEST(Report, SchemaRejectsBrokenReports) {
  nlohmann::json doc = to_json(sample_report());
  doc["stages"][0]["verdict"] = "maybe";
  doc["stages"][1].erase("seconds");
  doc["extra"] = 1;
  auto errors = validate_json(doc, report_json_schema());
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("/extra"), std::string::npos);
  bool named_verdict = false;
  for (const auto& e : errors) named_verdict |= e.find("/stages/0/verdict") != std::string::npos;
  EXPECT_TRUE(named_verdict);
  EXPECT_FALSE(report_from_json(nlohmann::json{{"schema", "other/1"}}).is_ok());
}

TEST(Report, OverallVerdictFollowsRequiredStages) {
  std::vector<StageResult> stages = sample_report().stages;
  EXPECT_EQ(overall_verdict(stages, {}), Verdict::kPass);
  stages[0].verdict = Verdict::kFail;
  EXPECT_EQ(overall_verdict(stages, {}), Verdict::kFail);
  stages[0].required = false;
  EXPECT_EQ(overall_verdict(stages, {}), Verdict::kPass);
  EXPECT_EQ(overall_verdict(stages, {Regression{"x", "y", "1", "2", "worse"}}), Verdict::kFail);
}

// `weights` is a required stage that was skipped: the pass says so, and --require-all fails it.
TEST(Report, APassWithRequiredStagesSkippedNamesThem) {
  Report r = sample_report();
  r.skipped_required = skipped_required_stages(r.stages);
  ASSERT_EQ(r.skipped_required, std::vector<std::string>{"weights"});
  EXPECT_EQ(r.verdict, Verdict::kPass);
  EXPECT_EQ(verdict_text(r), "pass with 1 required stage skipped: weights");
  EXPECT_EQ(verdict_text(r, true), "PASS with 1 required stage skipped: weights");
  r.stages.push_back(
      {"generation", "Generation spot checks", Verdict::kSkipped, true, "", "no tokenizer", 0, {}});
  r.stages.push_back({"stability", "Stability soak", Verdict::kSkipped, false, "", "optional", 0, {}});
  r.skipped_required = skipped_required_stages(r.stages);
  EXPECT_EQ(verdict_text(r),
            "pass with 2 required stages skipped: weights, generation");  // not the optional one

  const nlohmann::json doc = to_json(r);
  EXPECT_TRUE(validate_json(doc, report_json_schema()).empty()) << doc.dump(2);
  EXPECT_EQ(doc["verdict"], "pass");
  EXPECT_EQ(doc["skipped_required"], nlohmann::json({"weights", "generation"}));
  EXPECT_EQ(doc["require_all"], false);
  auto back = report_from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->skipped_required, r.skipped_required);
  // A report written before the key existed: read from the stages.
  nlohmann::json old_doc = doc;
  old_doc.erase("skipped_required");
  old_doc.erase("require_all");
  EXPECT_TRUE(validate_json(old_doc, report_json_schema()).empty());
  EXPECT_EQ(report_from_json(old_doc)->skipped_required, r.skipped_required);
  nlohmann::json bad = doc;
  bad["skipped_required"] = {"nonsense"};
  EXPECT_FALSE(validate_json(bad, report_json_schema()).empty());

  // Amber in HTML, with the list and the reasons; named in Markdown.
  const std::string html = render_html(r);
  EXPECT_NE(html.find("id=\"overall\" class=\"incomplete\" data-verdict=\"pass\" "
                      "data-skipped-required=\"weights generation\""),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("Verdict: pass with 2 required stages skipped: weights, generation"),
            std::string::npos);
  EXPECT_NE(html.find("<li data-stage=\"generation\"><b>Generation spot checks</b> — no tokenizer</li>"),
            std::string::npos)
      << html;
  EXPECT_NE(render_markdown(r).find("**Verdict: PASS with 2 required stages skipped: weights, generation**"),
            std::string::npos);

  // --require-all: the same stages fail the run.
  r.require_all = true;
  r.verdict = overall_verdict(r.stages, r.regressions, true);
  EXPECT_EQ(r.verdict, Verdict::kFail);
  EXPECT_EQ(verdict_text(r), "fail: 2 required stages skipped: weights, generation (--require-all)");
  EXPECT_TRUE(validate_json(to_json(r), report_json_schema()).empty());
  EXPECT_NE(render_html(r).find("id=\"overall\" class=\"fail\""), std::string::npos);
  // Optional stages may skip under --require-all.
  std::vector<StageResult> all_optional = r.stages;
  for (auto& s : all_optional) s.required = s.verdict != Verdict::kSkipped;
  EXPECT_EQ(overall_verdict(all_optional, {}, true), Verdict::kPass);
}

TEST(Report, AFailNamesWhatFailed) {
  Report r = sample_report();
  r.stages[0].verdict = Verdict::kFail;
  r.regressions = {Regression{"performance", "decode_tok_s", "20", "10", "fell"}};
  r.skipped_required = skipped_required_stages(r.stages);
  r.verdict = overall_verdict(r.stages, r.regressions);
  EXPECT_EQ(verdict_text(r),
            "fail: 1 required stage failed: structure; 1 regression against the previous report; 1 required "
            "stage skipped: weights");
  r.stages[0].verdict = Verdict::kPass;
  r.skipped_required.clear();
  EXPECT_EQ(verdict_text(r), "fail: 1 regression against the previous report");
}

TEST(Compare, NamesStageAndMetricRegressions) {
  Report old_report = sample_report();
  Report new_report = sample_report();
  EXPECT_TRUE(compare_reports(old_report, new_report, default_metric_rules({})).empty());
  new_report.stages[0].verdict = Verdict::kFail;
  new_report.stages[2].evidence["kl_mean"] = 1e-3;
  new_report.stages[3].evidence["decode_tok_s"] = 10.0;    // fell by half
  new_report.stages[3].evidence["prefill_tok_s"] = 190.0;  // within the 20% margin
  auto regressions = compare_reports(old_report, new_report, default_metric_rules({}));
  ASSERT_EQ(regressions.size(), 3u);
  EXPECT_EQ(regressions[0].stage, "structure");
  EXPECT_EQ(regressions[1].metric, "kl_mean");
  EXPECT_EQ(regressions[2].metric, "decode_tok_s");
}

TEST(Render, HtmlIsSelfContainedWithChecklistAndCharts) {
  Report r = sample_report();
  r.stages[0].summary = "<script>alert(1)</script>";
  const std::string html = render_html(r);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // escaped, and no scripts of our own
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  EXPECT_NE(html.find("data-stage=\"weights\" data-verdict=\"skipped\""), std::string::npos);
  EXPECT_NE(html.find("Layer-wise error"), std::string::npos);
  EXPECT_NE(html.find("Memory per device"), std::string::npos);
  EXPECT_NE(html.find("Throughput against the roofline"), std::string::npos);
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| 2 | Weights | SKIP | yes |"), std::string::npos);
}

TEST(Render, WritesAllThreeFilesAndNoTemporaries) {
  const auto dir = std::filesystem::temp_directory_path() / "day0_report_test";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_report_files(sample_report(), dir.string()).is_ok());
  for (const char* name : {"report.json", "report.md", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / name)) << name;
  }
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 3);
  auto doc = nlohmann::json::parse(slurp((dir / "report.json").string()));
  EXPECT_EQ(doc["model"], "deepseek-v3");
  std::filesystem::remove_all(dir);
}

// A report set is one unit: the second write replaces all three files at once, the old set and the
// temporary folder are gone afterwards, and nothing is left beside --out.
TEST(Render, ReportSetIsReplacedAsAWhole) {
  namespace fs = std::filesystem;
  const fs::path parent =
      fs::temp_directory_path() / (std::string("day0_report_set_") + std::to_string(getpid()));
  fs::remove_all(parent);
  fs::create_directories(parent);
  const fs::path out = parent / "out";
  Report first = sample_report();
  first.model = "first-model";
  ASSERT_TRUE(write_report_files(first, out.string()).is_ok());
  Report second = sample_report();
  second.model = "second-model";
  ASSERT_TRUE(write_report_files(second, out.string()).is_ok());
  EXPECT_EQ(nlohmann::json::parse(slurp((out / "report.json").string()))["model"], "second-model");
  EXPECT_NE(slurp((out / "report.md").string()).find("second-model"), std::string::npos);
  EXPECT_NE(slurp((out / "report.html").string()).find("second-model"), std::string::npos);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(parent)) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "out") << "left behind: " << e.path();
  }
  EXPECT_EQ(entries, 1);
  fs::remove_all(parent);
}

TEST(Render, OutIsCheckedAndLockedBeforeAnyWork) {
  namespace fs = std::filesystem;
  const fs::path parent =
      fs::temp_directory_path() / (std::string("day0_report_lock_") + std::to_string(getpid()));
  fs::remove_all(parent);
  fs::create_directories(parent);
  const std::string out = (parent / "out").string();
  auto lock = prepare_report_dir(out);
  ASSERT_TRUE(lock.is_ok()) << lock.status().to_string();
  // A second writer (another process, or another run in this one) is refused while the lock is held.
  auto second = prepare_report_dir(out);
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("another day0 run"), std::string::npos);
  lock = ReportDirLock();  // released
  EXPECT_TRUE(prepare_report_dir(out).is_ok());
  // A folder with files of its own is never replaced.
  fs::create_directories(parent / "mine");
  std::ofstream(parent / "mine" / "thesis.tex") << "x";
  auto foreign = prepare_report_dir((parent / "mine").string());
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_NE(foreign.status().message().find("thesis.tex"), std::string::npos);
  std::ofstream(parent / "file") << "x";
  EXPECT_FALSE(prepare_report_dir((parent / "file").string()).is_ok());
  EXPECT_FALSE(prepare_report_dir((parent / "no" / "parent").string()).is_ok());
  fs::remove_all(parent);
}

TEST(AtomicFile, ReplacesWholeFileOrReportsError) {
  const auto dir = std::filesystem::temp_directory_path() / "day0_atomic_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.txt").string();
  ASSERT_TRUE(write_file_atomic(path, "first").is_ok());
  ASSERT_TRUE(write_file_atomic(path, "second").is_ok());
  EXPECT_EQ(slurp(path), "second");
  Status bad = write_file_atomic((dir / "missing" / "f.txt").string(), "x");
  EXPECT_EQ(bad.code(), StatusCode::kIoError);
  EXPECT_NE(bad.message().find("missing"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace day0::report
