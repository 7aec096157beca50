#pragma once
// MODEL as the CLI takes it (a checkpoint folder) -> spec + bound weights, ready for an Engine.
#include <memory>
#include <string>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_weights.h"

namespace day0 {

struct LoadedModel {
  ModelSpec spec;
  std::shared_ptr<ModelWeights> weights;
  std::string folder;
};

// Resolves `model` (a folder with config.json and safetensors) and binds its weights. Catalog names
// have no weights: InvalidArgument saying so.
Result<LoadedModel> load_model(const std::string& model);
// Binds the weights of an already parsed spec from `source`.
Result<LoadedModel> load_model_from(const ModelSpec& spec, std::shared_ptr<const TensorSource> source);

// An engine over a loaded model on the named backend (resolver-wrapped: missing kernels fall back).
struct EngineHandle {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};
Result<EngineHandle> open_engine(const LoadedModel& model, const std::string& backend, EngineOptions options,
                                 int n_threads = 0);

}  // namespace day0
