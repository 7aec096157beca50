// Looks at the HTML report the way a person would: headless Chromium loads it, and the checklist it
// renders must carry the same verdicts as report.json.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "day0/report/render.h"
#include "day0/report/report.h"
#include "support/chromium.h"

namespace day0::report {
namespace {

using day0::testing::chromium_binary;
using day0::testing::run_capture;

TEST(HtmlInChromium, RendersChecklistWithReportVerdicts) {
  const std::string chromium = chromium_binary();
  if (chromium.empty()) GTEST_SKIP() << "chromium not installed: HTML rendering check skipped";
  Report r;
  r.model = "tiny";
  r.family = "llama";
  r.day0_version = "test";
  r.created_at = "now";
  r.backend = "cpu";
  r.stages = {{"structure", "Structure", Verdict::kPass, true, "ok", "", 0.1, {}},
              {"weights", "Weights", Verdict::kSkipped, true, "", "config only", 0.0, {}},
              {"alignment",
               "Alignment",
               Verdict::kFail,
               true,
               "",
               "layer 3 drifts",
               0.2,
               {{"layers", {{{"layer", 0}, {"cosine", 1.0}, {"max_abs_err", 1e-7}}}}}}};
  r.verdict = overall_verdict(r.stages, {});
  std::string templ = (std::filesystem::temp_directory_path() / "day0_chromium_XXXXXX").string();
  ASSERT_NE(mkdtemp(templ.data()), nullptr);
  const std::filesystem::path dir = templ;
  ASSERT_TRUE(write_report_files(r, dir.string()).is_ok());
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--user-data-dir=" +
      (dir / "profile").string();
  const std::string html_url = "file://" + (dir / "report.html").string();
  const std::string dom = run_capture(chromium + flags + " --dump-dom " + html_url + " 2>/dev/null");
  ASSERT_NE(dom.find("id=\"checklist\""), std::string::npos) << "chromium did not render the page";

  // Verdicts in the rendered DOM, in order, must equal report.json's.
  std::ifstream json_in(dir / "report.json");
  nlohmann::json doc = nlohmann::json::parse(json_in);
  const auto rendered = day0::testing::rendered_checklist(dom);
  ASSERT_EQ(rendered.size(), doc["stages"].size());
  for (size_t i = 0; i < rendered.size(); ++i) {
    EXPECT_EQ(rendered[i].first, doc["stages"][i]["id"]);
    EXPECT_EQ(rendered[i].second, doc["stages"][i]["verdict"]);
  }
  EXPECT_NE(dom.find("data-verdict=\"fail\""), std::string::npos);

  // And it paints: a screenshot is a real PNG of some size.
  const auto png = dir / "shot.png";
  run_capture(chromium + flags + " --window-size=1100,900 --screenshot=" + png.string() + " " + html_url +
              " 2>/dev/null");
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
  std::ifstream png_in(png, std::ios::binary);
  char magic[4] = {};
  png_in.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::error_code ignored;  // chromium may still be tearing its profile down
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace day0::report
