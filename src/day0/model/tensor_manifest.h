#pragma once
// The tensor manifest: every weight tensor a checkpoint of a ModelSpec must hold, with its Hugging
// Face name, shape and dtype. Single source of truth for parameter counts, verification and loading.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/core/dtype.h"

namespace day0 {

enum class TensorRole {
  kEmbedding,     // model.embed_tokens.weight
  kLmHead,        // lm_head.weight (absent when tied)
  kNorm,          // every RMSNorm / LayerNorm weight
  kAttention,     // q/k/v/o, MLA projections, biases, sinks
  kDenseMlp,      // dense SwiGLU layers
  kRouter,        // router / gate weights and biases, correction bias
  kRoutedExpert,  // routed expert weights (and their biases)
  kSharedExpert,  // shared expert weights (and Qwen2-MoE's shared gate)
  kQuantScale,    // FP8 weight_scale_inv, MXFP4 scales: storage, not parameters
};

struct TensorSpec {
  std::string name;            // e.g. "model.layers.3.mlp.experts.17.down_proj.weight"
  std::vector<int64_t> shape;  // as stored in the checkpoint
  DType dtype = DType::kBF16;  // as stored in the checkpoint
  TensorRole role = TensorRole::kAttention;
  int64_t layer = -1;   // -1: not in a decoder layer
  int64_t expert = -1;  // routed expert index, -1 otherwise
  int64_t params = 0;   // logical parameters it holds (MXFP4 blocks: 2 per byte; scales: 0)
  uint64_t bytes = 0;   // stored bytes
};

struct TensorManifest {
  std::vector<TensorSpec> tensors;
};

}  // namespace day0
