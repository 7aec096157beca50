#pragma once
// The oracle: every op as plain loops with double accumulation, written for clarity, not speed. Other
// backends are tested against these functions; the cpu backend also calls the cold ones (sampling).
// Each function checks its arguments (ops/kernel_checks.h) first.
#include <algorithm>
#include <cmath>

#include "day0/ops/kernel_args.h"

namespace day0::ref {

void embedding(const EmbeddingArgs& a);
void matmul(const MatmulArgs& a);
void grouped_matmul(const GroupedMatmulArgs& a);
void rms_norm(const RmsNormArgs& a);
void layer_norm(const LayerNormArgs& a);
void rope(const RopeArgs& a);
void attention(const AttentionArgs& a);
void mla_attention(const MlaArgs& a);
// The oracle of the paged kernels: every sequence's pages dequantised to contiguous float32, then
// attention / mla_attention above.
void paged_attention(const PagedAttentionArgs& a);
void paged_mla_attention(const PagedMlaArgs& a);
void indexer_topk(const IndexerTopkArgs& a);
void block_indexer_topk(const BlockIndexerTopkArgs& a);
void causal_conv1d(const CausalConv1dArgs& a);
void gated_delta_rule(const GatedDeltaRuleArgs& a);
void ssm_scan(const SsmScanArgs& a);
void gated_rms_norm(const GatedRmsNormArgs& a);
void softmax(const SoftmaxArgs& a);
void silu(const UnaryArgs& a);
void gelu(const UnaryArgs& a);
void sigmoid(const UnaryArgs& a);
void softplus(const UnaryArgs& a);
void tanh(const UnaryArgs& a);
void swiglu(const SwigluArgs& a);
void swiglu_clamped(const SwigluArgs& a);
void moe_router(const MoeRouterArgs& a);
void moe_experts(const MoeExpertsArgs& a);
void kv_compress(const KvCompressArgs& a);
void hc_weights(const HcWeightsArgs& a);
void hc_collapse(const HcCollapseArgs& a);
void hc_expand(const HcExpandArgs& a);
void add(const BinaryArgs& a);
void mul(const BinaryArgs& a);
void argmax(const ArgmaxArgs& a);
void sample(const SampleArgs& a);
void kv_write(const KvWriteArgs& a);
void kv_copy_blocks(const KvCopyBlocksArgs& a);
void clamp(const PointwiseArgs& a);
void scale(const PointwiseArgs& a);
void rsqrt(const PointwiseArgs& a);
void row_mean(const PointwiseArgs& a);
void gather_rows(const GatherRowsArgs& a);
void round_bf16(const PointwiseArgs& a);
void copy_columns(const CopyColumnsArgs& a);
void scatter_add(const ScatterAddArgs& a);

// Scalar activation definitions shared by every backend's tail loops.
inline double silu_of(double z) {
  return z / (1.0 + std::exp(-z));
}
inline double sigmoid_of(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}
// log(1 + e^z), z itself past 20 (torch's softplus threshold).
inline double softplus_of(double z) {
  return z > 20.0 ? z : std::log1p(std::exp(z));
}
// GELU with torch's tanh approximation (gelu_pytorch_tanh), and GEGLU: gelu_tanh(gate) * up.
inline double gelu_tanh_of(double z) {
  const double k = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * z * (1.0 + std::tanh(k * (z + 0.044715 * z * z * z)));
}
inline double geglu_of(double gate, double up) {
  return gelu_tanh_of(gate) * up;
}
// The clamped SwiGLU of swiglu_clamped (ops/kernel_args.h): SwiGLU-OAI's with up_shift 1, the plain clamp's
// silu(min(gate, limit)) * clamp(up) with alpha 1 and up_shift 0.
inline double clamped_swiglu_of(double gate, double up, double limit, double alpha, double up_shift) {
  const double g = std::min(gate, limit);
  const double u = std::clamp(up, -limit, limit);
  return (u + up_shift) * g * sigmoid_of(alpha * g);
}

}  // namespace day0::ref
