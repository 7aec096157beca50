#include <fmt/format.h>

#include "day0/core/html_escape.h"
#include "day0/core/human.h"
#include "day0/report/render.h"
#include "day0/report/svg_chart.h"

namespace day0::report {

namespace {

std::string layer_chart(const Report& report) {
  std::vector<Series> series;
  for (const char* id : {"alignment", "miniature"}) {
    const StageResult* stage = report.find_stage(id);
    if (stage == nullptr || !stage->evidence.contains("layers")) continue;
    Series err{std::string(id) + ": max abs error", {}, {}};
    Series cos{std::string(id) + ": 1 - cosine", {}, {}};
    for (const auto& layer : stage->evidence["layers"]) {
      if (!layer.contains("layer") || !layer["layer"].is_number()) continue;
      const double x = layer["layer"].get<double>();
      if (layer.contains("max_abs_err") && layer["max_abs_err"].is_number()) {
        err.x.push_back(x);
        err.y.push_back(layer["max_abs_err"].get<double>());
      }
      if (layer.contains("cosine") && layer["cosine"].is_number()) {
        cos.x.push_back(x);
        cos.y.push_back(1.0 - layer["cosine"].get<double>());
      }
    }
    if (!err.x.empty()) series.push_back(err);
    if (!cos.x.empty()) series.push_back(cos);
  }
  if (series.empty()) return "";
  return "<h2>Layer-wise error</h2>\n" +
         svg_line_chart("Error of each decoder layer's output", series, "layer", "error", true);
}

std::string memory_chart(const Report& report) {
  const StageResult* stage = report.find_stage("plan");
  if (stage == nullptr || !stage->evidence.contains("memory_per_device")) return "";
  const auto& items = stage->evidence["memory_per_device"];
  if (!items.is_object()) return "";
  std::vector<Bar> bars;
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it.value().is_number()) bars.push_back({it.key(), it.value().get<double>() / 1e9});
  }
  const double limit = stage->evidence.value("device_memory_bytes", 0.0) / 1e9;
  return "<h2>Memory per device</h2>\n" +
         svg_bar_chart("Memory breakdown per device (chosen plan)", bars, "GB", limit, "device memory");
}

std::string throughput_chart(const Report& report) {
  const StageResult* stage = report.find_stage("performance");
  if (stage == nullptr) return "";
  const auto& e = stage->evidence;
  std::vector<Bar> bars;
  auto add = [&](const char* key, const char* label) {
    if (e.contains(key) && e[key].is_number()) bars.push_back({label, e[key].get<double>()});
  };
  add("prefill_tok_s", "prefill measured");
  add("prefill_roofline_tok_s", "prefill roofline");
  add("decode_tok_s", "decode measured");
  add("decode_roofline_tok_s", "decode roofline");
  if (bars.empty()) return "";
  return "<h2>Throughput against the roofline</h2>\n" +
         svg_bar_chart("Tokens per second on this machine", bars, "tok/s");
}

// The audit's load levels and soak (target-speed): throughput and latency against concurrency, and
// latency over the soak's time.
std::string target_speed_charts(const Report& report) {
  const StageResult* stage = report.find_stage("target-speed");
  if (stage == nullptr || !stage->evidence.contains("levels") || !stage->evidence["levels"].is_array())
    return "";
  Series tput{"output tok/s", {}, {}};
  Series ttft50{"TTFT p50", {}, {}}, ttft99{"TTFT p99", {}, {}}, itl50{"ITL p50", {}, {}},
      itl99{"ITL p99", {}, {}};
  for (const auto& l : stage->evidence["levels"]) {
    const double c = l.value("concurrency", 0.0);
    tput.x.push_back(c);
    tput.y.push_back(l.value("output_tok_s", 0.0));
    for (auto [series, key] : {std::pair{&ttft50, "ttft_p50_s"}, std::pair{&ttft99, "ttft_p99_s"},
                               std::pair{&itl50, "itl_p50_s"}, std::pair{&itl99, "itl_p99_s"}}) {
      series->x.push_back(c);
      series->y.push_back(1e3 * l.value(key, 0.0));
    }
  }
  if (tput.x.empty()) return "";
  std::string html = "<h2>Target: speed and stability</h2>\n";
  html += svg_line_chart("Output tokens per second against concurrency", {tput}, "concurrent requests",
                         "tok/s", false);
  html += svg_line_chart("Latency against concurrency", {ttft50, ttft99, itl50, itl99}, "concurrent requests",
                         "ms", true);
  if (stage->evidence.contains("soak") && stage->evidence["soak"].contains("samples")) {
    Series p50{"e2e p50", {}, {}}, p99{"e2e p99", {}, {}};
    for (const auto& smp : stage->evidence["soak"]["samples"]) {
      const double t = smp.value("t_s", 0.0);
      p50.x.push_back(t);
      p50.y.push_back(1e3 * smp.value("e2e_p50_s", 0.0));
      p99.x.push_back(t);
      p99.y.push_back(1e3 * smp.value("e2e_p99_s", 0.0));
    }
    if (p50.x.size() >= 2)
      html += svg_line_chart("Request latency over the soak", {p50, p99}, "seconds", "ms", false);
    Series rss{"resident memory", {}, {}};
    for (const auto& smp : stage->evidence["soak"]["samples"]) {
      if (smp.value("rss_mb", -1.0) < 0) continue;
      rss.x.push_back(smp.value("t_s", 0.0));
      rss.y.push_back(smp.value("rss_mb", 0.0));
    }
    if (rss.x.size() >= 2)
      html += svg_line_chart("The target's resident memory over the soak", {rss}, "seconds", "MB", false);
  }
  return html;
}

// The audit's generation spot checks: the target's greedy text beside the reference's.
std::string target_side_by_side(const Report& report) {
  const StageResult* stage = report.find_stage("target-generation");
  if (stage == nullptr || !stage->evidence.contains("prompts") || !stage->evidence["prompts"].is_array())
    return "";
  std::string html =
      "<h2>Target: generation side by side</h2>\n<table id=\"target-generation\"><tr><th>prompt</th>"
      "<th>target</th><th>reference (Day0)</th><th>prefix agreement</th></tr>\n";
  for (const auto& row : stage->evidence["prompts"]) {
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}</td></tr>\n",
                        html_escape(row.value("id", "")), html_escape(row.value("target", "")),
                        html_escape(row.value("reference", "")), row.value("prefix_agreement", 0.0));
  }
  return html + "</table>\n";
}

// `text` with the part after `agreed` (when it starts with it) marked as divergent.
std::string marked_text(const std::string& text, const std::string& agreed) {
  if (agreed.empty() || text.rfind(agreed, 0) != 0) return html_escape(text);
  return html_escape(agreed) + "<mark>" + html_escape(text.substr(agreed.size())) + "</mark>";
}

// The generation spot checks side by side: prompt, Day0's output, the reference's and the base's,
// what follows the first divergence marked.
std::string spot_table(const Report& report) {
  const StageResult* stage = report.find_stage("generation");
  if (stage == nullptr || !stage->evidence.contains("prompts")) return "";
  const auto& rows = stage->evidence["prompts"];
  const bool with_reference = stage->evidence.contains("reference");
  const bool with_base = stage->evidence.contains("base");
  std::string html =
      "<h2>Generation spot checks</h2>\n<p>Greedy outputs; the text after the first divergent token is "
      "<mark>marked</mark>.</p>\n<table id=\"spot-checks\"><tr><th>prompt</th><th>Day0</th>";
  if (with_reference) html += "<th>reference</th>";
  if (with_base) html += "<th>base model</th>";
  html += "</tr>\n";
  for (const auto& row : rows) {
    auto field = [&](const nlohmann::json& obj, const char* key) {
      return obj.contains(key) && obj[key].is_string() ? obj[key].get<std::string>() : std::string();
    };
    const std::string agreed = row.contains("reference") ? field(row["reference"], "agreed_text")
                               : row.contains("base")    ? field(row["base"], "agreed_text")
                                                         : std::string();
    html += fmt::format("<tr data-prompt=\"{}\"><td><b>{}</b> ({})<br>{}</td><td><pre>{}</pre></td>",
                        html_escape(field(row, "id")), html_escape(field(row, "id")),
                        html_escape(field(row, "kind")), html_escape(field(row, "prompt")),
                        marked_text(field(row, "output"), agreed));
    for (const char* side : {"reference", "base"}) {
      if ((side == std::string("reference") && !with_reference) ||
          (side == std::string("base") && !with_base))
        continue;
      if (!row.contains(side)) {
        html += "<td></td>";
        continue;
      }
      const auto& c = row[side];
      html += fmt::format("<td><pre>{}</pre>first divergence: {}, agreement {:.0f}%</td>",
                          marked_text(field(c, "text"), field(c, "agreed_text")),
                          c.value("first_divergence", int64_t{-1}) < 0
                              ? std::string("none")
                              : fmt::format("token {}", c.value("first_divergence", int64_t{-1})),
                          100.0 * c.value("prefix_agreement", 0.0));
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

}  // namespace

std::string render_html(const Report& report) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>Day-0 report: " +
      html_escape(report.model) +
      "</title>\n<style>\nbody{font-family:sans-serif;margin:2em;max-width:1100px}\n"
      "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:4px 8px;text-align:left;"
      "vertical-align:top}\n.pass{background:#d9f2d9}.fail{background:#f8d0d0}.skipped{background:#eee}\n"
      ".incomplete{background:#fde3b0}\n"
      "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}\n"
      "#spot-checks pre{white-space:pre-wrap;max-width:340px}\n</style></head><body>\n";
  html += fmt::format("<h1>Day-0 adaptation report: {}</h1>\n", html_escape(report.model));
  // A pass with required stages skipped checked less than the checklist asks: amber, not green, with
  // the stages and why each was skipped.
  const bool incomplete = report.verdict == Verdict::kPass && !report.skipped_required.empty();
  std::string skipped_ids;
  for (const auto& id : report.skipped_required) skipped_ids += (skipped_ids.empty() ? "" : " ") + id;
  html += fmt::format(
      "<p id=\"overall\" class=\"{}\" data-verdict=\"{}\" data-skipped-required=\"{}\"><b>Verdict: {}</b> — "
      "family <code>{}</code>, backend <code>{}</code>, day0 {}, {}</p>\n",
      incomplete ? "incomplete" : verdict_name(report.verdict), verdict_name(report.verdict),
      html_escape(skipped_ids), html_escape(verdict_text(report)), html_escape(report.family),
      html_escape(report.backend), html_escape(report.day0_version), html_escape(report.created_at));
  if (!report.skipped_required.empty()) {
    html += fmt::format("<p>Required stages skipped{}:</p>\n<ul id=\"skipped-required\">\n",
                        report.require_all ? " (they fail the run under --require-all)"
                                           : " (--require-all makes them fail the run; --optional STAGE "
                                             "accepts a skip)");
    for (const auto& id : report.skipped_required) {
      const StageResult* stage = report.find_stage(id);
      html +=
          fmt::format("<li data-stage=\"{}\"><b>{}</b>{}</li>\n", html_escape(id),
                      html_escape(stage != nullptr ? stage->title : id),
                      stage != nullptr && !stage->reason.empty() ? " — " + html_escape(stage->reason) : "");
    }
    html += "</ul>\n";
  }
  html +=
      "<h2>Checklist</h2>\n<table id=\"checklist\">\n<tr><th>#</th><th>stage</th><th>verdict</th>"
      "<th>required</th><th>time</th><th>summary</th></tr>\n";
  int index = 1;
  for (const auto& s : report.stages) {
    std::string summary = html_escape(s.summary);
    if (!s.reason.empty()) summary += (summary.empty() ? "" : "<br>") + html_escape(s.reason);
    for (const auto& w : s.warnings)
      summary += "<br><b>warning</b> " + html_escape(w.id) + ": " + html_escape(w.message);
    html += fmt::format(
        "<tr class=\"stage {0}\" data-stage=\"{1}\" data-verdict=\"{0}\"><td>{2}</td><td>{3}</td>"
        "<td>{0}</td><td>{4}</td><td>{5}</td><td>{6}</td></tr>\n",
        verdict_name(s.verdict), html_escape(s.id), index++, html_escape(s.title), s.required ? "yes" : "no",
        human_seconds(s.seconds), summary);
  }
  html += "</table>\n";
  if (!report.regressions.empty()) {
    html +=
        "<h2>Regressions</h2>\n<table id=\"regressions\"><tr><th>stage</th><th>metric</th><th>old</th>"
        "<th>new</th><th>why</th></tr>\n";
    for (const auto& r : report.regressions) {
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                          html_escape(r.stage), html_escape(r.metric), html_escape(r.old_value),
                          html_escape(r.new_value), html_escape(r.why));
    }
    html += "</table>\n";
  }
  html += layer_chart(report);
  html += memory_chart(report);
  html += throughput_chart(report);
  html += spot_table(report);
  html += target_speed_charts(report);
  html += target_side_by_side(report);
  html += "<h2>Evidence</h2>\n";
  for (const auto& s : report.stages) {
    html += fmt::format("<details><summary>{} ({})</summary><pre>{}</pre></details>\n", html_escape(s.title),
                        verdict_name(s.verdict), html_escape(s.evidence.dump(2)));
  }
  html += "</body></html>\n";
  return html;
}

}  // namespace day0::report
