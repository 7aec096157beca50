// Stage 4: the single-card smoke test — a miniature of the same structure (same family, attention,
// routing, rope scaling and weight format, small dimensions) is synthesised, run (prefill + greedy
// decode with the KV cache) on the chosen backend and aligned against our reference backend, and,
// where a Python with transformers is available, against Hugging Face transformers itself (which
// also checks how the config was read; our reference backend reads it the way we do).
#include <fmt/format.h>

#include "day0/align/align_model.h"
#include "day0/core/human.h"
#include "day0/quant/quantize_checkpoint.h"
#include "day0/report/adapt_context.h"
#include "day0/report/stages/align_evidence.h"
#include "day0/report/stages/hf_reference.h"
#include "day0/synth/synth_checkpoint.h"

namespace day0::report {

void run_miniature_stage(AdaptContext& ctx, StageResult& out) {
  if (!ctx.model) return stage_skip(out, "the structure stage did not resolve the model");
  const std::string dir = (ctx.work_dir / "miniature").string();
  SynthOptions synth;
  synth.seed = ctx.options.seed;
  // A pack-quantized release (INT4 / INT8 groups): the miniature is synthesised unquantized and packed
  // by `day0 quantize` with the release's bits, groups and ignore list, as its publisher packed it.
  // transformers then reads the unquantized miniature (packed checkpoints need compressed-tensors,
  // which the reference tooling does not install); the packed one is held to our reference backend.
  const PackedIntSpec& packed = ctx.model->spec.weights.packed;
  const bool pack = packed.bits != 0;
  const std::string synth_dir = pack ? (ctx.work_dir / "miniature-unquantized").string() : dir;
  ModelSpec synth_spec = ctx.model->spec;
  synth_spec.weights.packed = PackedIntSpec{};
  auto mini = synthesize_miniature(synth_spec, MiniatureOptions{}, synth, synth_dir);
  if (!mini.is_ok()) return stage_fail(out, "synthesising the miniature: " + mini.status().to_string());
  if (pack) {
    if (packed.layout != PackedIntLayout::kCompressedTensors) {
      return stage_skip(
          out, "a GPTQ / AWQ miniature is not written yet (day0 quantize writes compressed-tensors)");
    }
    QuantizeOptions q;
    q.bits = packed.bits;
    q.group_size = packed.group_size;
    q.symmetric = packed.symmetric;
    q.skip = packed.ignore;
    auto quantized = quantize_checkpoint(synth_dir, dir, q);
    if (!quantized.is_ok())
      return stage_fail(out, "packing the miniature: " + quantized.status().to_string());
  }
  ctx.miniature_dir = dir;

  AlignRequest request;
  request.model = dir;
  request.backend = ctx.options.backend;
  request.against_reference = true;
  request.greedy_steps = ctx.options.new_tokens;
  auto aligned = align_model(request);
  if (!aligned.is_ok()) return stage_fail(out, "running the miniature: " + aligned.status().to_string());

  out.evidence = align_evidence(*aligned);
  out.evidence["miniature"] = {{"params", mini->params},        {"tensors", mini->n_tensors},
                               {"shards", mini->shards.size()}, {"bytes", mini->tensor_bytes},
                               {"layers", mini->spec.n_layers}, {"hidden", mini->spec.hidden_size}};
  if (!aligned->pass()) return stage_fail(out, align_failure_reason(*aligned));
  const std::string against_ours = fmt::format(
      "{}-parameter miniature ({} layers, {} shards{}): {} vs reference backend, {}",
      human_count(static_cast<double>(mini->params)), mini->spec.n_layers, mini->shards.size(),
      pack ? fmt::format(", packed INT{} g{} by day0 quantize", packed.bits, packed.group_size) : "",
      ctx.options.backend, align_pass_summary(*aligned));

  const HfReferenceRun hf =
      dump_with_transformers(ctx.options.reference_python, synth_dir, ctx.work_dir, ctx.options.seed);
  nlohmann::json& hf_evidence = out.evidence["transformers"];
  hf_evidence = {{"used", false}, {"python", hf.python}, {"versions", hf.versions}, {"reason", hf.reason}};
  if (hf.failed) return stage_fail(out, "Hugging Face transformers reference: " + hf.reason);
  if (!hf.attempted) {
    return stage_pass(out, against_ours + "; Hugging Face transformers not checked: " + hf.reason);
  }
  AlignRequest against_hf;
  against_hf.model = synth_dir;
  against_hf.backend = ctx.options.backend;
  against_hf.reference_path = hf.dump_path;
  auto hf_aligned = align_model(against_hf);
  if (!hf_aligned.is_ok()) {
    return stage_fail(out, "aligning against transformers' dump: " + hf_aligned.status().to_string());
  }
  hf_evidence["used"] = true;
  hf_evidence["alignment"] = align_evidence(*hf_aligned);
  if (!hf_aligned->pass()) {
    return stage_fail(
        out, "against Hugging Face transformers (" + hf.versions + "): " + align_failure_reason(*hf_aligned));
  }
  stage_pass(out, fmt::format("{}; vs Hugging Face transformers ({}, {}){}: {}", against_ours, hf.versions,
                              hf.python, pack ? " on the unquantized miniature" : "",
                              align_pass_summary(*hf_aligned)));
}

}  // namespace day0::report
