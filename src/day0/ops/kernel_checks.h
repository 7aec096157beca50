#pragma once
// Shape contracts of ops/kernel_args.h, checked by every backend before it runs a kernel. A failure
// is a bug in the caller: D0_CHECK throws InternalError naming the op and the mismatch.
#include "day0/ops/kernel_args.h"

namespace day0 {

void check_args(const EmbeddingArgs& a);
void check_args(const MatmulArgs& a);
void check_args(const GroupedMatmulArgs& a);
void check_args(const RmsNormArgs& a);
void check_args(const LayerNormArgs& a);
void check_args(const RopeArgs& a);
void check_args(const AttentionArgs& a);
void check_args(const MlaArgs& a);
void check_args(const IndexerTopkArgs& a);
void check_args(const BlockIndexerTopkArgs& a);
// A block-sparse selection of `rows` query rows over `n_heads` heads (empty passes).
void check_selection(const BlockSelection& s, int64_t rows, int64_t n_heads, const char* op);
void check_args(const CausalConv1dArgs& a);
void check_args(const GatedDeltaRuleArgs& a);
void check_args(const SsmScanArgs& a);
void check_args(const GatedRmsNormArgs& a);
void check_args(const SwigluArgs& a);
void check_args(const BinaryArgs& a);
void check_args(const MoeRouterArgs& a);
void check_args(const MoeExpertsArgs& a);
void check_args(const KvCompressArgs& a);
void check_args(const HcWeightsArgs& a);
void check_args(const HcCollapseArgs& a);
void check_args(const HcExpandArgs& a);
void check_args(const ArgmaxArgs& a);
void check_args(const SampleArgs& a);
void check_args(const GatherRowsArgs& a);
void check_args(const CopyColumnsArgs& a);
void check_args(const ScatterAddArgs& a);
// Also that the pool and the views are host memory (what the host backends read and write).
void check_args(const KvWriteArgs& a);
void check_args(const KvCopyBlocksArgs& a);
// Same shape for x and y (unary ops, clamp, scale, rsqrt); row_mean wants y [R, 1].
void check_same_shape(ConstMatrix x, ConstMatrix y, const char* op);

// Resolved defaults.
inline int64_t v_head_dim_of(const AttentionArgs& a) {
  return a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
}
float attention_scale_of(const AttentionArgs& a);

}  // namespace day0
