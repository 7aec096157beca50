#pragma once
// Parameter counts from the tensor manifest (the single source of truth).
//
// Conventions (the publishers' ones, see docs/commands.md, "inspect"):
// - total: every stored parameter of the main model: the input embedding and, when untied, the
//   lm_head both count; MTP layers and quantization scales do not. MXFP4 blocks count two
//   parameters a byte.
// - active: what one token touches: everything except the routed experts it is not sent to (top-k
//   of n_experts), with the embedding matrix and the lm_head each counted in full.
// - active_without_embedding: active minus the input embedding.
// - active_without_embeddings: active minus the input embedding and the lm_head.
#include <cstdint>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {

struct ParamCounts {
  int64_t total = 0;
  int64_t active = 0;
  // Zero-computation experts let a token use fewer real experts: the fewest
  // (max(0, top-k - zero experts)) gives active_min; `active` is the most. Equal without them.
  int64_t active_min = 0;
  int64_t active_without_embedding = 0;
  int64_t active_without_embeddings = 0;
  int64_t embedding = 0;              // input embedding matrix
  int64_t lm_head = 0;                // 0 when tied to the embedding
  int64_t attention = 0;              // attention projections, biases, sinks
  int64_t norms = 0;                  // every norm weight
  int64_t dense_mlp = 0;              // dense FFN layers
  int64_t router = 0;                 // router weights / biases
  int64_t routed_experts = 0;         // all routed experts
  int64_t routed_experts_active = 0;  // the top-k share one token uses
  int64_t shared_experts = 0;
  int64_t hyper_connections = 0;  // hyper-connections' stream mixing (every layer and the final head)
  // The multi-token-prediction layers' own parameters (their routed experts all counted), outside
  // `total`: plain decoding never reads them.
  int64_t mtp = 0;
  uint64_t stored_bytes = 0;  // checkpoint bytes of the main model, scales included
};

Result<ParamCounts> count_params(const ModelSpec& spec, const TensorManifest& manifest);
// Builds the manifest and counts it.
Result<ParamCounts> count_params(const ModelSpec& spec);

}  // namespace day0
