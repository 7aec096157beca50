#include "day0/report/stages/align_evidence.h"

#include <fmt/format.h>

namespace day0::report {

nlohmann::json align_evidence(const AlignReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& row : r.layers.rows) {
    if (row.layer < 0) continue;
    layers.push_back({{"layer", row.layer},
                      {"cosine", row.compare.cosine},
                      {"max_abs_err", row.compare.max_abs_err},
                      {"pass", row.pass}});
  }
  int64_t greedy_agree = 0;
  for (const auto& g : r.greedy) greedy_agree += g.pass ? 1 : 0;
  return {{"backend", r.backend},
          {"precision", r.precision},
          {"kv_dtype", r.kv_dtype},
          {"reference", r.reference},
          {"prompts", r.prompts},
          {"positions", r.logits.positions},
          {"logits_max_abs_err", r.logits.max_abs_err},
          {"logit_range", r.logits.logit_range},
          {"min_cosine", r.logits.min_cosine},
          {"kl_mean", r.logits.kl_mean},
          {"kl_p99", r.logits.kl_p99},
          {"kl_max", r.logits.kl_max},
          {"top1_agreement", r.logits.same_top1},
          {"top5_overlap", r.logits.top5_overlap},
          {"ppl_ratio", r.logits.ppl_ratio},
          {"greedy_checks", r.greedy.size()},
          {"greedy_passed", greedy_agree},
          {"first_failing_layer", r.layers.first_failing_name()},
          {"failures", r.failures},
          {"layers", layers},
          {"full", align_report_json(r)}};
}

std::string align_failure_reason(const AlignReport& r) {
  std::string reason;
  if (r.layers.first_failing >= 0) reason = "drift starts at " + r.layers.first_failing_name() + "; ";
  for (size_t i = 0; i < r.failures.size() && i < 3; ++i) reason += (i ? "; " : "") + r.failures[i];
  return reason;
}

std::string align_pass_summary(const AlignReport& r) {
  return fmt::format("{} prompts, max |dlogit| {:.2e} ({:.1e} of range), KL mean {:.1e}, top-1 {:.0f}%",
                     r.prompts, r.logits.max_abs_err,
                     r.logits.logit_range > 0 ? r.logits.max_abs_err / r.logits.logit_range : 0.0,
                     r.logits.kl_mean, 100 * r.logits.same_top1);
}

}  // namespace day0::report
