#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/report/render.h"

namespace day0::report {

namespace {
const char* verdict_mark(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kFail:
      return "FAIL";
    case Verdict::kSkipped:
      return "SKIP";
  }
  return "SKIP";
}
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '|') c = ' ';
  }
  return text;
}
}  // namespace

std::string render_markdown(const Report& report) {
  std::string md = fmt::format("# Day-0 adaptation report: {}\n\n", report.model);
  md +=
      fmt::format("**Verdict: {}** — family `{}`, backend `{}`, day0 {}, {}\n\n", verdict_text(report, true),
                  report.family, report.backend, report.day0_version, report.created_at);
  md += "| # | stage | verdict | required | time | summary |\n|---|---|---|---|---|---|\n";
  int index = 1;
  for (const auto& s : report.stages) {
    std::string summary = s.summary;
    if (!s.reason.empty()) summary += (summary.empty() ? "" : " — ") + s.reason;
    for (const auto& w : s.warnings) summary += fmt::format(" — **warning** {}: {}", w.id, w.message);
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", index++, s.title, verdict_mark(s.verdict),
                      s.required ? "yes" : "no", human_seconds(s.seconds), one_line(summary));
  }
  if (!report.regressions.empty()) {
    md +=
        "\n## Regressions against the previous report\n\n| stage | metric | old | new | why "
        "|\n|---|---|---|---|---|\n";
    for (const auto& r : report.regressions) {
      md += fmt::format("| {} | {} | {} | {} | {} |\n", r.stage, r.metric, r.old_value, r.new_value,
                        one_line(r.why));
    }
  }
  md += "\n## Evidence\n";
  for (const auto& s : report.stages) {
    md += fmt::format("\n### {} ({})\n\n```json\n{}\n```\n", s.title, verdict_mark(s.verdict),
                      s.evidence.dump(2));
  }
  return md;
}

}  // namespace day0::report
