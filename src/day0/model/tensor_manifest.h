#pragma once
// The tensor manifest: every weight tensor a checkpoint of a ModelSpec must hold, with its Hugging
// Face name, shape and dtype. Single source of truth for parameter counts, verification and loading.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"
#include "day0/model/model_spec.h"

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

const char* tensor_role_name(TensorRole role);  // "embedding", "routed_expert", ...

// Every tensor of the main model in checkpoint order: embedding, then per layer input norm,
// attention, post-attention norm and FFN, then the final norm and lm_head (absent when tied).
// Multi-token-prediction layers (spec.n_mtp_layers, stored as model.layers.{n_layers}...) are not
// listed: plain decoding skips them. FP8 block checkpoints list each quantized weight followed by its
// F32 `weight_scale_inv`; gpt-oss MXFP4 lists `*_blocks` / `*_scales` (U8) beside BF16 biases.
// Fails (never wraps) when a size product overflows or the tensor count is unreasonably large.
Result<TensorManifest> build_tensor_manifest(const ModelSpec& spec);

// Name prefix of the decoder ("model." or "language_model.model." for Llama 4 multimodal releases).
std::string decoder_prefix(const ModelSpec& spec);

}  // namespace day0
