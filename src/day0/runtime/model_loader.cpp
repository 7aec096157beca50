#include "day0/runtime/model_loader.h"

#include <fmt/format.h>

#include "day0/model/catalog.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {

LoadOptions load_options_for(ActivationPrecision precision) {
  return LoadOptions{.exact_f32_dequantized = precision == ActivationPrecision::kF32,
                     .int_kernels = precision == ActivationPrecision::kBF16};
}

Result<LoadedModel> load_model_from(const ModelSpec& spec, std::shared_ptr<const TensorSource> source,
                                    const LoadOptions& options) {
  // Before any tensor is looked for: a model whose mechanisms no block runs is refused by name.
  D0_RETURN_IF_ERROR(check_engine_runs(spec));
  LoadedModel m;
  // Pack-quantized projections are dequantized at load: the engine sees the unquantized model.
  m.spec = unpacked_spec(spec);
  m.stored_spec = spec;
  m.folder = source->origin();
  // A tensor-parallel rank binds parts of the dequantized tensors: the integer layout is not split yet.
  const bool int_kernels = options.int_kernels && options.shard.whole();
  D0_ASSIGN_OR_RETURN(
      m.weights,
      bind_model_weights(m.spec,
                         unpacked_source(std::move(source), spec, options.exact_f32_dequantized, int_kernels),
                         options.shard, options.experts, options.stage, options.mtp_layers));
  if (spec.weights.packed.bits != 0) {
    const std::string dequantized = options.exact_f32_dequantized ? "dequantized at load to exact F32"
                                                                  : "dequantized at load to the scale dtype";
    m.int_weight_path = m.weights->int_projections.n > 0 ? m.weights->int_projections.label() : dequantized;
  }
  return m;
}

Result<LoadedModel> load_model(const std::string& model, const LoadOptions& options) {
  D0_ASSIGN_OR_RETURN(ResolvedModel resolved, resolve_model(model));
  if (resolved.from_catalog || resolved.folder.empty()) {
    return invalid_argument(
        fmt::format("{} is a catalog entry without weights; pass a checkpoint folder", model));
  }
  D0_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source,
                      open_checkpoint_source(resolved.folder.string(), options.page_cache));
  D0_ASSIGN_OR_RETURN(
      LoadedModel m,
      load_model_from(resolved.spec, std::shared_ptr<const TensorSource>(std::move(source)), options));
  m.folder = resolved.folder.string();
  return m;
}

Result<EngineHandle> open_engine(const LoadedModel& model, const std::string& backend, EngineOptions options,
                                 int n_threads) {
  EngineHandle h;
  BackendOptions bo;
  bo.n_threads = n_threads;
  D0_ASSIGN_OR_RETURN(h.backend, open_backend(backend, bo));
  D0_ASSIGN_OR_RETURN(h.engine, Engine::create(model.spec, model.weights, *h.backend, options));
  return h;
}

}  // namespace day0
