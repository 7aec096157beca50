#pragma once
// The operator list of a model, recorded: the library's generator runs one prefill step (two prompt
// tokens) and one decode step on a RecordingBackend (backends/recording_backend.h), so the list is
// exactly the kernel calls the engine makes, in the engine's default options (F32 activations, BF16
// KV cache, MLA naive for prefill and absorbed for decode).
//
// Without weights (a config or catalog entry, any size) the engine is bound to the weight table's
// shapes only (make_shape_only_source) and the recorder computes nothing: a full-size dry run that
// costs the binding of the tensor table and a few small activations, no weight memory. Shapes and
// figures then come from the very arguments the kernels would get, with attention costed at
// `context_tokens`. With weights and a backend, the same steps really run (the test that the dry run
// records what a real step calls).
#include <cstdint>
#include <memory>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/recording_backend.h"
#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/op_list.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_weights.h"

namespace day0 {

// The prompt of the recorded prefill step: two tokens (0, 1, ...), so that it is a multi-token step, or
// as many as the widest compression window, so that compressed attention pools one (it pools only
// complete windows) and its pooling is listed.
int64_t recorded_prompt_tokens(const ModelSpec& spec);

// Dry run from the spec alone. A pack-quantized / GPTQ / AWQ checkpoint is recorded as a BF16 run
// binds it (load_options_for(kBF16)): its projections as INT8 / INT4 for the integer kernels, or
// dequantized to the scale dtype where the layout cannot be kept; OpList::bf16_activations says so.
Result<OpList> record_op_list(const ModelSpec& spec, int64_t context_tokens = kDefaultOpContext);

// The dry run's calls one by one, both steps, before op_list() merges them: a figure taken apart by
// step (the prefill step's calls keep their costs here, and the list keeps none).
Result<std::vector<RecordedCall>> record_calls(const ModelSpec& spec, int64_t context_tokens);

// Real run: `weights` bound for `spec`, kernels computed on `backend` by an engine with `options`.
Result<OpList> record_op_list(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
                              int64_t context_tokens = kDefaultOpContext, EngineOptions options = {});

}  // namespace day0
