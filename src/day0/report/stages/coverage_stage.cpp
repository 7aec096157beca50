// Stage 2: operator coverage — every operator of the model's forward pass runs natively on the
// chosen backend, is decomposed into ops that do, or falls back to the host; none may be missing
// (and with --strict-ops none may fall back).
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "day0/graph/coverage.h"
#include "day0/model/model_summary.h"
#include "day0/report/adapt_context.h"

namespace day0::report {

void run_coverage_stage(AdaptContext& ctx, StageResult& out) {
  if (!ctx.model || !ctx.summary) return stage_skip(out, "the structure stage did not resolve the model");
  const OpList& ops = ctx.summary->ops;  // recorded by the structure stage
  BackendOptions options;
  options.strict_ops = ctx.options.strict_ops;
  options.quiet = true;
  auto coverage = compute_coverage(ctx.options.model, ops, ctx.options.backend, options);
  if (!coverage.is_ok()) return stage_fail(out, coverage.status().to_string());
  const CoverageReport& c = *coverage;
  static constexpr const char* kKeys[4] = {"native", "decomposed", "host_fallback", "missing"};
  nlohmann::json classes = nlohmann::json::object(), flops = nlohmann::json::object(),
                 bytes = nlohmann::json::object();
  for (int p = 0; p < 4; ++p) {
    classes[kKeys[p]] = c.ops[static_cast<size_t>(p)];
    flops[kKeys[p]] = c.total_flops > 0 ? c.flops[static_cast<size_t>(p)] / c.total_flops : 0.0;
    bytes[kKeys[p]] = c.total_bytes > 0 ? c.bytes[static_cast<size_t>(p)] / c.total_bytes : 0.0;
  }
  out.evidence = {{"backend", c.backend}, {"strict_ops", c.strict_ops}, {"classes", classes},
                  {"flops_share", flops}, {"bytes_share", bytes},       {"coverage", coverage_json(c)}};
  std::string decomposed;
  std::vector<std::string> seen;
  for (const auto& row : c.rows) {
    if (row.resolution.placement != Placement::kDecomposed) continue;
    if (std::find(seen.begin(), seen.end(), row.op.name) != seen.end()) continue;
    seen.push_back(row.op.name);
    std::string pieces;
    for (const auto& p : row.resolution.pieces) pieces += (pieces.empty() ? "" : "+") + p;
    decomposed += fmt::format("{}{} -> {}", decomposed.empty() ? "" : ", ", row.op.name, pieces);
  }
  const std::string counts = fmt::format("{} ops: {} native, {} decomposed, {} host fallback, {} missing",
                                         c.rows.size(), c.ops[0], c.ops[1], c.ops[2], c.ops[3]);
  if (c.failed()) {
    std::string missing;
    for (const auto& row : c.rows) {
      const bool bad = row.resolution.placement == Placement::kMissing ||
                       (c.strict_ops && row.resolution.placement == Placement::kHostFallback);
      if (bad) {
        missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", row.op.name,
                               placement_name(row.resolution.placement));
      }
    }
    return stage_fail(out, counts + "; not runnable: " + missing);
  }
  stage_pass(out, decomposed.empty() ? counts : counts + " (" + decomposed + ")");
}

}  // namespace day0::report
