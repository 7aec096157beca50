#pragma once
// Canonical operator names shared by the model's recorded operator list (runtime/op_recording.h) and
// the op registry (ops/op_schema.h): coverage joins the two on these strings.
#include <string_view>

namespace day0::op {

inline constexpr std::string_view kEmbedding = "embedding";
inline constexpr std::string_view kMatmul = "matmul";  // y = x W^T (+b), weight dtype attr
// Block-diagonal matmul: groups of x's columns each through its own block of W's rows (grouped output
// projection).
inline constexpr std::string_view kGroupedMatmul = "grouped_matmul";
inline constexpr std::string_view kRmsNorm = "rms_norm";
inline constexpr std::string_view kLayerNorm = "layer_norm";
inline constexpr std::string_view kRope = "rope";            // layout, partial, scaling attrs
inline constexpr std::string_view kAttention = "attention";  // GQA causal / sliding / chunked / sinks
inline constexpr std::string_view kMlaAttention = "mla_attention";
// The same two over a paged KV cache, one call for all sequences of a step.
inline constexpr std::string_view kPagedAttention = "paged_attention";
inline constexpr std::string_view kPagedMlaAttention = "paged_mla_attention";
// Sparse attention's lightning indexer: scores a paged cache's indexer keys, top-k per query.
inline constexpr std::string_view kIndexerTopk = "indexer_topk";
// Block-sparse attention's indexer: scores a paged cache's index keys, max-pools them over key blocks and
// keeps the top-k blocks (local blocks first) per query and index head.
inline constexpr std::string_view kBlockIndexerTopk = "block_indexer_topk";
// Gated DeltaNet (linear attention): the causal depthwise conv with its per-sequence
// window, the delta-rule recurrence over its per-sequence state, and the gated output RMSNorm.
inline constexpr std::string_view kCausalConv1d = "causal_conv1d";
inline constexpr std::string_view kGatedDeltaRule = "gated_delta_rule";
inline constexpr std::string_view kGatedRmsNorm = "gated_rms_norm";
// Mamba-2: the selective state-space scan over a per-sequence float32 state (conv: causal_conv1d).
inline constexpr std::string_view kSsmScan = "ssm_scan";
inline constexpr std::string_view kSoftmax = "softmax";
inline constexpr std::string_view kSilu = "silu";
inline constexpr std::string_view kGelu = "gelu";
inline constexpr std::string_view kSigmoid = "sigmoid";
inline constexpr std::string_view kSoftplus = "softplus";             // log(1 + e^x); x past 20 as is
inline constexpr std::string_view kTanh = "tanh";                     // soft-capping: c tanh(x / c)
inline constexpr std::string_view kSwiglu = "swiglu";                 // silu(gate) * up
inline constexpr std::string_view kSwigluClamped = "swiglu_clamped";  // swiglu with swiglu_limit
inline constexpr std::string_view kMoeRouter = "moe_router";          // scoring + top-k + weights
inline constexpr std::string_view kMoeExperts = "moe_experts";        // dispatch, expert MLPs, combine
// Compressed attention's learned gated pooling: every `ratio` tokens' keys into one entry.
inline constexpr std::string_view kKvCompress = "kv_compress";
// Hyper-connections (mHC): the mixing weights of n residual streams (sigmoid pre / post, a
// Sinkhorn-normalised comb), the streams collapsed into a layer's input, and expanded back with its output.
inline constexpr std::string_view kHcWeights = "hc_weights";
inline constexpr std::string_view kHcCollapse = "hc_collapse";
inline constexpr std::string_view kHcExpand = "hc_expand";
inline constexpr std::string_view kAdd = "add";
inline constexpr std::string_view kMul = "mul";
inline constexpr std::string_view kArgmax = "argmax";
// The KV cache's writes: a step's rows into their page slots (converted to the cache dtype), and the
// block copies of copy on write.
inline constexpr std::string_view kKvWrite = "kv_write";
inline constexpr std::string_view kKvCopyBlocks = "kv_copy_blocks";
inline constexpr std::string_view kSample = "sample";
// Data movement and rounding the blocks need between fused ops, so that they never touch elements on
// the host: the activation dtype's rounding points, and column ranges of grouped rows (MLA heads).
inline constexpr std::string_view kRoundBf16 = "round_bf16";      // y = float(bf16(x)), ties to even
inline constexpr std::string_view kCopyColumns = "copy_columns";  // strided column groups, row by row

// Primitives the fused ops above decompose into (ops/decompositions.h). The blocks call few of them
// (scale, row_mean, gather_rows); backends implement them so that a fused op they lack can still run
// natively.
inline constexpr std::string_view kClamp = "clamp";             // y = min(max(x, lo), hi)
inline constexpr std::string_view kScale = "scale";             // y = x * scale + shift
inline constexpr std::string_view kRsqrt = "rsqrt";             // y = 1 / sqrt(x + eps)
inline constexpr std::string_view kRowMean = "row_mean";        // y[r] = mean_c x[r, c]
inline constexpr std::string_view kGatherRows = "gather_rows";  // y[i] = x[idx[i]]
inline constexpr std::string_view kScatterAdd = "scatter_add";  // y[idx[i]] += w[i] * x[i]

}  // namespace day0::op
