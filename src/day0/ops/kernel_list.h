#pragma once
// The one table of kernels: every op a backend runs, as (method, argument struct, op name constant).
// Everything that lists the kernels is generated from it: the op names (op_names.h: the constant's
// string is the method's name), the Backend interface's pure virtuals (backends/backend.h) and the
// wrappers that forward every kernel (reference, recording, timing, the fallback resolver, test
// doubles: backends/kernel_list.h). Adding an op is a row here plus its contract, schema row and
// kernels (docs/HOWTO-add-an-op.md); tests/ops/kernel_table_test.cpp checks that every row has a
// schema (so coverage names it) and runs on the cpu and reference backends.
//
// Contracts of the argument structs: ops/kernel_args.h.
#define D0_FOR_EACH_KERNEL(X)                                                                            \
  X(embedding, EmbeddingArgs, kEmbedding)                                                                \
  /* y = x W^T (+b), keyed by the weight format */                                                       \
  X(matmul, MatmulArgs, kMatmul)                                                                         \
  /* block-diagonal matmul: groups of x's columns each through its own block of W's rows */              \
  X(grouped_matmul, GroupedMatmulArgs, kGroupedMatmul)                                                   \
  X(rms_norm, RmsNormArgs, kRmsNorm)                                                                     \
  X(layer_norm, LayerNormArgs, kLayerNorm)                                                               \
  X(rope, RopeArgs, kRope)                                                                               \
  /* GQA attention, causal / sliding / chunked / sinks, over contiguous keys; MLA's likewise */          \
  X(attention, AttentionArgs, kAttention)                                                                \
  X(mla_attention, MlaArgs, kMlaAttention)                                                               \
  /* the same two over a paged KV cache, one call for all sequences of a step */                         \
  X(paged_attention, PagedAttentionArgs, kPagedAttention)                                                \
  X(paged_mla_attention, PagedMlaArgs, kPagedMlaAttention)                                               \
  /* sparse attention's lightning indexer: a paged cache's indexer keys scored, top-k per query */       \
  X(indexer_topk, IndexerTopkArgs, kIndexerTopk)                                                         \
  /* block-sparse attention's indexer: index keys max-pooled over key blocks, top-k blocks per head */   \
  X(block_indexer_topk, BlockIndexerTopkArgs, kBlockIndexerTopk)                                         \
  /* Gated DeltaNet: the causal depthwise conv (its window per sequence), the delta rule over a state */ \
  /* per sequence, the gated output RMSNorm; Mamba-2's selective scan over a float32 state */            \
  X(causal_conv1d, CausalConv1dArgs, kCausalConv1d)                                                      \
  X(gated_delta_rule, GatedDeltaRuleArgs, kGatedDeltaRule)                                               \
  X(gated_rms_norm, GatedRmsNormArgs, kGatedRmsNorm)                                                     \
  X(ssm_scan, SsmScanArgs, kSsmScan)                                                                     \
  X(softmax, SoftmaxArgs, kSoftmax)                                                                      \
  X(silu, UnaryArgs, kSilu)                                                                              \
  X(gelu, UnaryArgs, kGelu)                                                                              \
  X(sigmoid, UnaryArgs, kSigmoid)                                                                        \
  /* log(1 + e^x), x past 20 as is; tanh for soft-capping c tanh(x / c) */                               \
  X(softplus, UnaryArgs, kSoftplus)                                                                      \
  X(tanh, UnaryArgs, kTanh)                                                                              \
  /* silu(gate) * up, and with swiglu_limit */                                                           \
  X(swiglu, SwigluArgs, kSwiglu)                                                                         \
  X(swiglu_clamped, SwigluArgs, kSwigluClamped)                                                          \
  /* scoring + top-k + weights; dispatch, the expert MLPs, combine */                                    \
  X(moe_router, MoeRouterArgs, kMoeRouter)                                                               \
  X(moe_experts, MoeExpertsArgs, kMoeExperts)                                                            \
  /* compressed attention's learned gated pooling: every `ratio` tokens' keys into one entry */          \
  X(kv_compress, KvCompressArgs, kKvCompress)                                                            \
  /* hyper-connections: the n streams' mixing weights, the collapse into a block's input, the expand */  \
  X(hc_weights, HcWeightsArgs, kHcWeights)                                                               \
  X(hc_collapse, HcCollapseArgs, kHcCollapse)                                                            \
  X(hc_expand, HcExpandArgs, kHcExpand)                                                                  \
  X(add, BinaryArgs, kAdd)                                                                               \
  X(mul, BinaryArgs, kMul)                                                                               \
  X(argmax, ArgmaxArgs, kArgmax)                                                                         \
  X(sample, SampleArgs, kSample)                                                                         \
  /* the KV cache's writes: a step's rows into their page slots, the block copies of copy on write */    \
  X(kv_write, KvWriteArgs, kKvWrite)                                                                     \
  X(kv_copy_blocks, KvCopyBlocksArgs, kKvCopyBlocks)                                                     \
  /* data movement and rounding between fused ops: y = float(bf16(x)); strided column groups */          \
  X(round_bf16, PointwiseArgs, kRoundBf16)                                                               \
  X(copy_columns, CopyColumnsArgs, kCopyColumns)                                                         \
  /* primitives the fused ops decompose into (graph/decompositions.h), so that a fused op a backend */   \
  /* lacks still runs natively: min(max(x, lo), hi); x * scale + shift; 1 / sqrt(x + eps); row mean; */  \
  /* y[i] = x[idx[i]]; y[idx[i]] += w[i] * x[i] */                                                       \
  X(clamp, PointwiseArgs, kClamp)                                                                        \
  X(scale, PointwiseArgs, kScale)                                                                        \
  X(rsqrt, PointwiseArgs, kRsqrt)                                                                        \
  X(row_mean, PointwiseArgs, kRowMean)                                                                   \
  X(gather_rows, GatherRowsArgs, kGatherRows)                                                            \
  X(scatter_add, ScatterAddArgs, kScatterAdd)
