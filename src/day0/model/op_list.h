#pragma once
// The operator list: every kernel call of one prefill step and one decode step of the forward pass,
// as recorded by running the engine on a recording backend (runtime/op_recording.h), so the list is
// what runs. Op names are those of ops/op_names.h (the coverage check joins on them).
//
// Figures are per decoded token with `context_tokens` tokens already cached (batch 1): FLOPs count a
// multiply-add as 2; bytes count weights read (stored format, scales included) and KV-cache bytes
// read by attention (sliding / chunked layers bounded by their window).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "day0/model/model_spec.h"

namespace day0 {

struct OpSpec {
  std::string name;   // op::kMatmul, op::kPagedAttention, ...
  std::string label;  // the weight it reads ("self_attn.q_proj", "mlp.experts", "lm_head"); "" if none
  // Attributes taken from the kernel arguments, e.g. weights=FP8-block, block=128x128, mask=sliding,
  // window=128, layout=interleaved, sinks=true, form=absorbed.
  std::map<std::string, std::string> attrs;
  WeightFormat weights = WeightFormat::kF32;  // what the call is keyed by (kF32: it reads no weights)
  std::vector<std::vector<int64_t>> shapes;   // argument shapes of one call (decode: one token)
  bool prefill = false;                       // called in the prefill step
  bool decode = false;                        // called in the decode step
  int64_t calls_per_token = 0;                // decode calls per decoded token (all layers)
  double flops_per_token = 0;                 // all decode calls together
  double matmul_flops_per_token = 0;          // the part multiplying by weights (2 per weight element)
  double bytes_per_token = 0;                 // all decode calls together
  bool operator==(const OpSpec&) const = default;
};

struct OpList {
  int64_t context_tokens = 0;
  // Recorded with BF16 activations (a pack-quantized checkpoint's dry run: the integer kernels' path);
  // false: the engine's default, F32.
  bool bf16_activations = false;
  std::vector<OpSpec> ops;  // decode ops in call order, then prefill-only ops; layers merged
  double total_flops_per_token() const;
  double total_bytes_per_token() const;
};

inline constexpr int64_t kDefaultOpContext = 4096;

}  // namespace day0
