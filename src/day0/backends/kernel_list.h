#pragma once
// Every kernel of the Backend interface as (method, argument struct, op name constant), so that
// wrappers (reference, partial, the fallback resolver) forward all of them without hand-written lists
// that could drift from backend.h.
#define D0_FOR_EACH_KERNEL(X)                                    \
  X(embedding, EmbeddingArgs, kEmbedding)                        \
  X(matmul, MatmulArgs, kMatmul)                                 \
  X(grouped_matmul, GroupedMatmulArgs, kGroupedMatmul)           \
  X(rms_norm, RmsNormArgs, kRmsNorm)                             \
  X(layer_norm, LayerNormArgs, kLayerNorm)                       \
  X(rope, RopeArgs, kRope)                                       \
  X(attention, AttentionArgs, kAttention)                        \
  X(mla_attention, MlaArgs, kMlaAttention)                       \
  X(paged_attention, PagedAttentionArgs, kPagedAttention)        \
  X(paged_mla_attention, PagedMlaArgs, kPagedMlaAttention)       \
  X(indexer_topk, IndexerTopkArgs, kIndexerTopk)                 \
  X(block_indexer_topk, BlockIndexerTopkArgs, kBlockIndexerTopk) \
  X(causal_conv1d, CausalConv1dArgs, kCausalConv1d)              \
  X(gated_delta_rule, GatedDeltaRuleArgs, kGatedDeltaRule)       \
  X(gated_rms_norm, GatedRmsNormArgs, kGatedRmsNorm)             \
  X(ssm_scan, SsmScanArgs, kSsmScan)                             \
  X(softmax, SoftmaxArgs, kSoftmax)                              \
  X(silu, UnaryArgs, kSilu)                                      \
  X(gelu, UnaryArgs, kGelu)                                      \
  X(sigmoid, UnaryArgs, kSigmoid)                                \
  X(softplus, UnaryArgs, kSoftplus)                              \
  X(tanh, UnaryArgs, kTanh)                                      \
  X(swiglu, SwigluArgs, kSwiglu)                                 \
  X(swiglu_clamped, SwigluArgs, kSwigluClamped)                  \
  X(moe_router, MoeRouterArgs, kMoeRouter)                       \
  X(moe_experts, MoeExpertsArgs, kMoeExperts)                    \
  X(kv_compress, KvCompressArgs, kKvCompress)                    \
  X(hc_weights, HcWeightsArgs, kHcWeights)                       \
  X(hc_collapse, HcCollapseArgs, kHcCollapse)                    \
  X(hc_expand, HcExpandArgs, kHcExpand)                          \
  X(add, BinaryArgs, kAdd)                                       \
  X(mul, BinaryArgs, kMul)                                       \
  X(argmax, ArgmaxArgs, kArgmax)                                 \
  X(sample, SampleArgs, kSample)                                 \
  X(kv_write, KvWriteArgs, kKvWrite)                             \
  X(kv_copy_blocks, KvCopyBlocksArgs, kKvCopyBlocks)             \
  X(round_bf16, PointwiseArgs, kRoundBf16)                       \
  X(copy_columns, CopyColumnsArgs, kCopyColumns)                 \
  X(clamp, PointwiseArgs, kClamp)                                \
  X(scale, PointwiseArgs, kScale)                                \
  X(rsqrt, PointwiseArgs, kRsqrt)                                \
  X(row_mean, PointwiseArgs, kRowMean)                           \
  X(gather_rows, GatherRowsArgs, kGatherRows)                    \
  X(scatter_add, ScatterAddArgs, kScatterAdd)

// Declares every kernel as an override, inside a class deriving from Backend.
#define D0_KERNEL_OVERRIDE(method, Args, op) void method(const Args& a) override;
#define D0_DECLARE_KERNEL_OVERRIDES D0_FOR_EACH_KERNEL(D0_KERNEL_OVERRIDE)
