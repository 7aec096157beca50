#pragma once
// The operator list: every operator one decode step of the forward pass runs, with the op names of
// ops/op_names.h (the coverage check joins on them), attributes, shapes, how many times a token
// calls it, and the FLOPs and bytes it costs per token.
//
// Figures are for decoding one token with `context_tokens` tokens already cached (batch 1):
// FLOPs count a multiply-add as 2; bytes count weights read (stored format, scales included) and
// KV-cache bytes read by attention (sliding / chunked layers bounded by their window).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

struct OpSpec {
  std::string name;   // op::kMatmul, op::kAttention, ...
  std::string label;  // where in the model: "attn.q_proj", "moe.experts.down_proj", "lm_head"
  // Attributes the coverage check matches kernels on, e.g. weight_dtype=F8_E4M3,
  // weight_layout=block_128x128, mask=sliding, window=128, layout=interleaved, sinks=true.
  std::map<std::string, std::string> attrs;
  DType activation_dtype = DType::kBF16;
  DType weight_dtype = DType::kBF16;         // matmul / embedding / norm weights (kBF16 otherwise)
  std::vector<std::vector<int64_t>> shapes;  // matmul: {weight [out, in]}; attention: {q, k, v per token}
  int64_t calls_per_token = 0;               // over all layers (routed experts: layers x top-k)
  double flops_per_token = 0;                // all calls together
  double bytes_per_token = 0;                // all calls together
  bool operator==(const OpSpec&) const = default;
};

struct OpList {
  int64_t context_tokens = 0;
  std::vector<OpSpec> ops;  // in forward order, identical ops of different layers merged
  double total_flops_per_token() const;
  double total_bytes_per_token() const;
};

inline constexpr int64_t kDefaultOpContext = 4096;
Result<OpList> build_op_list(const ModelSpec& spec, int64_t context_tokens = kDefaultOpContext);

}  // namespace day0
