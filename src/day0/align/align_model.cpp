#include "day0/align/align_model.h"

#include <fmt/format.h>

#include "day0/runtime/model_loader.h"
#include "day0/runtime/prompt_ids.h"

namespace day0 {

Result<AlignReport> align_model(const AlignRequest& req) {
  std::optional<ReferenceDump> ref;
  if (!req.reference_path.empty()) {
    D0_ASSIGN_OR_RETURN(ReferenceDump d, read_reference_dump(req.reference_path));
    ref = std::move(d);
  } else if (!req.against_reference) {
    return invalid_argument("align needs --reference DUMP (or --against reference)");
  }
  D0_ASSIGN_OR_RETURN(LoadedModel model, load_model(req.model, load_options_for(req.precision)));
  if (ref && ref->prompts.front().logits.cols != model.spec.vocab_size) {
    return invalid_argument(fmt::format("{}: logits have {} columns but the model's vocabulary is {}",
                                        req.reference_path, ref->prompts.front().logits.cols,
                                        model.spec.vocab_size));
  }
  EngineOptions options;
  options.precision = req.precision;
  options.kv_dtype =
      req.kv_dtype.value_or(req.precision == ActivationPrecision::kF32 ? KvDtype::kF32 : KvDtype::kBF16);
  options.mla = req.mla;
  D0_ASSIGN_OR_RETURN(EngineHandle engine, open_engine(model, req.backend, options, req.n_threads));

  ReferenceDump baseline;
  std::string reference_text;
  if (req.against_reference) {
    if (!ref) {
      ReferenceDump prompts;
      std::vector<std::vector<int64_t>> ids;
      if (!req.prompt_ids.empty()) {
        D0_ASSIGN_OR_RETURN(ids, parse_prompt_ids(req.prompt_ids, model.spec.vocab_size));
      } else {
        ids = seeded_prompts(3, 12, model.spec.vocab_size, 1);
      }
      for (auto& p : ids) {
        ReferencePrompt rp;
        rp.input_ids = std::move(p);
        rp.greedy_ids.assign(static_cast<size_t>(req.greedy_steps), 0);
        rp.hidden[0] = FloatMatrix();  // ask for hidden states
        prompts.prompts.push_back(std::move(rp));
      }
      ref = std::move(prompts);
    }
    D0_ASSIGN_OR_RETURN(EngineHandle oracle, open_engine(model, "reference", options, 1));
    D0_ASSIGN_OR_RETURN(baseline, run_reference_prompts(*oracle.engine, *ref, "day0 reference backend"));
    reference_text = fmt::format("day0 reference backend ({} activations, {} KV cache)",
                                 precision_name(req.precision), kv_dtype_name(options.kv_dtype));
  } else {
    baseline = *ref;
    reference_text = fmt::format("{} ({}, {})", ref->producer(), ref->version(), ref->dtype());
  }
  D0_ASSIGN_OR_RETURN(const ReferenceDump mine,
                      run_reference_prompts(*engine.engine, baseline, "day0 " + req.backend));
  AlignReport report =
      compare_dumps(baseline, mine, req.thresholds ? *req.thresholds : default_thresholds(req.precision));
  report.model = req.model;
  report.backend = req.backend;
  report.precision = precision_name(req.precision);
  report.kv_dtype = kv_dtype_name(options.kv_dtype);
  report.reference = reference_text;
  return report;
}

}  // namespace day0
