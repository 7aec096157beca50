#pragma once
// The alignment figures the miniature and alignment stages report, in the report's evidence keys
// (docs/report-schema.md) that --compare gates on.
#include <nlohmann/json.hpp>
#include <string>

#include "day0/align/align_runner.h"

namespace day0::report {

nlohmann::json align_evidence(const AlignReport& report);
std::string align_failure_reason(const AlignReport& report);  // names the first failing layer
std::string align_pass_summary(const AlignReport& report);

}  // namespace day0::report
