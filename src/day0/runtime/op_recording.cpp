#include "day0/runtime/op_recording.h"

#include <vector>

#include "day0/backends/recording_backend.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {
namespace {

Result<OpList> record(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend* compute,
                      int64_t context_tokens) {
  if (context_tokens < 0) return invalid_argument("operator list: context_tokens must be >= 0");
  if (spec.vocab_size < 2) return invalid_argument("operator list: the vocabulary needs two tokens");
  RecordingBackend recorder(compute, context_tokens);
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(spec, std::move(weights), recorder));
  // Two prompt tokens: a multi-token prefill step (MLA takes its naive form there), then one decode
  // step; greedy, as `run` defaults to.
  const std::vector<int32_t> prompt = {0, 1};
  recorder.set_phase(StepPhase::kPrefill);
  auto generated = generate(*engine, prompt, 2, SamplingParams{}, 0, [&](const GenerationStep&) {
    recorder.set_phase(StepPhase::kDecode);
    return true;
  });
  if (!generated.is_ok()) return generated.status().with_context("recording the operator list");
  return recorder.op_list();
}

}  // namespace

Result<OpList> record_op_list(const ModelSpec& spec, int64_t context_tokens) {
  const ModelSpec engine_spec = unpacked_spec(spec);
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(engine_spec));
  D0_ASSIGN_OR_RETURN(std::shared_ptr<const TensorSource> shapes, make_shape_only_source(manifest));
  D0_ASSIGN_OR_RETURN(std::shared_ptr<ModelWeights> weights,
                      bind_model_weights(engine_spec, std::move(shapes)));
  return record(engine_spec, std::move(weights), nullptr, context_tokens);
}

Result<OpList> record_op_list(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
                              int64_t context_tokens) {
  return record(spec, std::move(weights), &backend, context_tokens);
}

}  // namespace day0
