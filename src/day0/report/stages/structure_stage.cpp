// Stage 1: the config is understood — family, layer plan, parameter counts (what `inspect` shows).
#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/report/adapt_context.h"
#include "day0/runtime/op_recording.h"

namespace day0::report {

void run_structure_stage(AdaptContext& ctx, StageResult& out) {
  auto resolved = resolve_model(ctx.options.model, ctx.options.strict_config);
  if (!resolved.is_ok()) return stage_fail(out, resolved.status().to_string());
  ctx.model = std::move(resolved).value();
  auto ops = record_op_list(ctx.model->spec);
  if (!ops.is_ok()) return stage_fail(out, ops.status().to_string());
  auto summary = summarize_model(ctx.model->spec, ctx.model->source, std::move(ops).value());
  if (!summary.is_ok()) return stage_fail(out, summary.status().to_string());
  ctx.summary = std::move(summary).value();
  ctx.real_weights = !ctx.model->from_catalog && !ctx.model->folder.empty();

  const ModelSummary& s = *ctx.summary;
  const ModelSpec& spec = s.spec;
  out.evidence = {{"source", s.source},
                  {"family", spec.family},
                  {"architecture", spec.architecture},
                  {"n_layers", spec.n_layers},
                  {"attention", describe_attention(spec)},
                  {"rope", describe_rope(spec)},
                  {"weights", describe_weights(spec)},
                  {"total_params", s.params.total},
                  {"active_params", s.params.active},
                  {"n_tensors", s.n_tensors},
                  {"kv_bytes_per_token", s.kv_cache.bytes_per_token},
                  {"kv_layout", s.kv_cache.layout}};
  if (spec.moe) out.evidence["moe"] = describe_moe(spec);
  const auto& unknown = ctx.model->config_audit.unknown_keys;
  out.evidence["unknown_config_keys"] = unknown;
  const std::string unknown_note = unknown.empty()
                                       ? ""
                                       : fmt::format("; {} unknown field(s) \u2014 may change the math: {}",
                                                     unknown.size(), fmt::join(unknown, ", "));
  stage_pass(
      out,
      fmt::format("{} ({}), {} layers, {} params total / {} active, {} tensors{}", spec.family,
                  describe_attention(spec), spec.n_layers, human_count(static_cast<double>(s.params.total)),
                  human_count(static_cast<double>(s.params.active)), with_commas(s.n_tensors), unknown_note));
}

}  // namespace day0::report
