// Stage 5: precision alignment of the real model — against --reference (a dump of Hugging Face
// transformers in original precision) when given; else against our reference backend on a few
// prompts when the real weights are here and fit this machine; else skipped with the reason.
#include <fmt/format.h>

#include "day0/align/align_model.h"
#include "day0/core/human.h"
#include "day0/report/adapt_context.h"
#include "day0/report/machine_info.h"
#include "day0/report/stages/align_evidence.h"

namespace day0::report {

void run_alignment_stage(AdaptContext& ctx, StageResult& out) {
  if (!ctx.model) return stage_skip(out, "the structure stage did not resolve the model");
  if (!ctx.real_weights) {
    return stage_skip(out, ctx.options.reference_dump.empty()
                               ? "no weights (a config alone): the miniature stage stands in for alignment"
                               : "--reference given, but MODEL has no weights to run against it");
  }
  AlignRequest request;
  request.model = ctx.model->folder.string();
  request.backend = ctx.options.backend;
  request.greedy_steps = ctx.options.new_tokens;
  if (!ctx.options.reference_dump.empty()) {
    request.reference_path = ctx.options.reference_dump;
  } else {
    // The reference backend doubles the work and holds float32 copies of nothing: it reads the same
    // mapped weights, so "fits" means the checkpoint fits in the memory that is free now.
    const uint64_t stored = ctx.summary ? ctx.summary->params.stored_bytes : 0;
    const uint64_t available = read_machine_info().memory_available_bytes;
    if (stored > available / 2) {
      return stage_skip(
          out,
          fmt::format("no --reference, and the weights ({}) do not fit half of this machine's "
                      "free memory ({}) to run against the reference backend",
                      human_bytes(static_cast<double>(stored)), human_bytes(static_cast<double>(available))));
    }
    request.against_reference = true;
  }
  auto aligned = align_model(request);
  if (!aligned.is_ok()) return stage_fail(out, aligned.status().to_string());
  out.evidence = align_evidence(*aligned);
  if (!aligned->pass()) return stage_fail(out, align_failure_reason(*aligned));
  stage_pass(
      out, fmt::format("{} against {}: {}", ctx.options.backend,
                       request.against_reference ? std::string("the reference backend") : aligned->reference,
                       align_pass_summary(*aligned)));
}

}  // namespace day0::report
