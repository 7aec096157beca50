#pragma once
// MODEL as the CLI takes it (a checkpoint folder) -> spec + bound weights, ready for an Engine.
#include <memory>
#include <string>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_weights.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {

struct LoadedModel {
  ModelSpec spec;         // what the engine computes with (packed integer projections unpacked)
  ModelSpec stored_spec;  // as the checkpoint stores its weights, packed integer codes included
  std::shared_ptr<ModelWeights> weights;
  std::string folder;
  // How integer-quantized projections are computed, for `run` to print ("" for a checkpoint without
  // them): "int4 g128 x int8 activations (210 projections)", "dequantized at load to exact F32", ...
  std::string int_weight_path;
};

struct LoadOptions {
  // Pack-quantized projections (dequantized at load) as exact float32 products rather than rounded to
  // the scale's dtype: what a float32 run must compute with to agree with transformers in float32.
  bool exact_f32_dequantized = false;
  // Pack-quantized / GPTQ / AWQ projections kept as INT8 / INT4 in memory for the integer kernels
  // (int8 activations per 32-column block, MatmulArgs::exact = false) instead of dequantized at load.
  // What a BF16 run of a quantized checkpoint uses; a float32 run keeps the exact dequantized weights
  // (bit for bit what it computed before the integer kernels existed).
  bool int_kernels = false;
  // Tensor parallelism: bind only this rank's part of every tensor (model_weights.h).
  TensorShard shard;
  // Expert parallelism: bind only this rank's routed experts (model_weights.h).
  ExpertShard experts;
  // Pipeline parallelism: bind only this stage's layers (model_weights.h).
  PipelineStage stage;
  // The checkpoint's pages cached already: kept as they are, or dropped to be read back in 2 MiB
  // folios (tensor_source.h).
  PageCache page_cache = PageCache::kKeep;
  // Bind the checkpoint's multi-token-prediction layers too (ModelWeights::mtp), for drafts from them
  // (EngineOptions::mtp_layers). Off: plain runs never read them.
  bool mtp_layers = false;
};
// The load options a run in `precision` needs: F32 -> exact float32 dequantized; BF16 -> integer kernels.
LoadOptions load_options_for(ActivationPrecision precision);

// Resolves `model` (a folder with config.json and safetensors) and binds its weights. Catalog names
// have no weights: InvalidArgument saying so.
Result<LoadedModel> load_model(const std::string& model, const LoadOptions& options = {});
// Binds the weights of an already parsed spec from `source`.
Result<LoadedModel> load_model_from(const ModelSpec& spec, std::shared_ptr<const TensorSource> source,
                                    const LoadOptions& options = {});

// An engine over a loaded model on the named backend (resolver-wrapped: missing kernels fall back).
struct EngineHandle {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};
Result<EngineHandle> open_engine(const LoadedModel& model, const std::string& backend, EngineOptions options,
                                 int n_threads = 0);

}  // namespace day0
