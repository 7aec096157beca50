#include "day0/report/compare.h"

#include <fmt/format.h>

#include <cmath>

namespace day0::report {

std::vector<MetricRule> default_metric_rules(const CompareMargins& m) {
  std::vector<MetricRule> rules;
  for (const char* stage : {"miniature", "alignment"}) {
    rules.push_back({stage, "logits_max_abs_err", false, m.alignment, 1e-6});
    rules.push_back({stage, "kl_mean", false, m.alignment, 1e-7});
    rules.push_back({stage, "kl_max", false, m.alignment, 1e-6});
    rules.push_back({stage, "top1_agreement", true, 0.0, 1e-9});
  }
  rules.push_back({"performance", "prefill_tok_s", true, m.throughput, 0.0});
  rules.push_back({"performance", "decode_tok_s", true, m.throughput, 0.0});
  return rules;
}

namespace {
bool numeric(const nlohmann::json& evidence, const std::string& key, double& out) {
  if (!evidence.is_object() || !evidence.contains(key) || !evidence[key].is_number()) return false;
  out = evidence[key].get<double>();
  return std::isfinite(out);
}
}  // namespace

std::vector<Regression> compare_reports(const Report& old_report, const Report& new_report,
                                        const std::vector<MetricRule>& rules) {
  std::vector<Regression> found;
  for (const auto& old_stage : old_report.stages) {
    const StageResult* now = new_report.find_stage(old_stage.id);
    if (now == nullptr) continue;
    if (old_stage.verdict == Verdict::kPass && now->verdict == Verdict::kFail) {
      found.push_back({old_stage.id, "verdict", "pass", "fail",
                       "stage passed in the previous report and fails now: " + now->reason});
    }
  }
  for (const auto& rule : rules) {
    const StageResult* old_stage = old_report.find_stage(rule.stage);
    const StageResult* new_stage = new_report.find_stage(rule.stage);
    if (old_stage == nullptr || new_stage == nullptr) continue;
    double before = 0, after = 0;
    if (!numeric(old_stage->evidence, rule.key, before) || !numeric(new_stage->evidence, rule.key, after))
      continue;
    bool worse = false;
    std::string why;
    if (rule.higher_is_better) {
      const double floor = before * (1.0 - rule.relative_margin) - rule.absolute_slack;
      worse = after < floor;
      why = fmt::format("fell below {:.6g} (previous {:.6g} minus {:.0f}% margin)", floor, before,
                        100 * rule.relative_margin);
    } else {
      const double ceiling = before * (1.0 + rule.relative_margin) + rule.absolute_slack;
      worse = after > ceiling;
      why = fmt::format("rose above {:.6g} (previous {:.6g} plus {:.0f}% margin)", ceiling, before,
                        100 * rule.relative_margin);
    }
    if (worse) {
      found.push_back(
          {rule.stage, rule.key, fmt::format("{:.6g}", before), fmt::format("{:.6g}", after), why});
    }
  }
  return found;
}

}  // namespace day0::report
