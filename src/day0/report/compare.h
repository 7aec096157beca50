#pragma once
// The regression gate of `adapt --compare OLD/report.json`: a stage that passed and now fails, an
// alignment metric that worsened past a margin, or throughput that fell past a margin.
#include <string>
#include <vector>

#include "day0/report/report.h"

namespace day0::report {

struct MetricRule {
  std::string stage;  // stage id
  std::string key;    // numeric key in that stage's evidence
  bool higher_is_better = false;
  double relative_margin = 0.1;  // allowed relative worsening
  double absolute_slack = 0.0;   // ignore changes smaller than this (noise floor of tiny metrics)
};

struct CompareMargins {
  double alignment = 0.25;   // alignment errors may grow 25% (plus slack) before it counts
  double throughput = 0.20;  // tokens/s may fall 20%: hosts drift (bench/RESULTS.md, "Machines and noise")
};

// The metric rules used by default, built from the margins.
std::vector<MetricRule> default_metric_rules(const CompareMargins& margins);

std::vector<Regression> compare_reports(const Report& old_report, const Report& new_report,
                                        const std::vector<MetricRule>& rules);

}  // namespace day0::report
