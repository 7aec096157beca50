#pragma once
// Arguments of every kernel, one plain struct per op (op names: op_names.h). The same structs are
// taken by every backend, by the decompositions and by the reference oracle, so a kernel is tested
// against reference by filling one struct.
//
// Common contract:
//  - Activations are float32 MatrixViews [tokens, features]; shapes are checked with D0_CHECK
//    (a mismatch is a bug in the caller, not bad input).
//  - Outputs never alias inputs unless the op says "in place" / "may alias".
//  - T = rows of the activation (tokens in this call). T = 0 is allowed and does nothing.
//  - Positions are absolute token positions (HF cache_position).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

#include "day0/model/attention_cost.h"
#include "day0/model/model_spec.h"
#include "day0/ops/kv_pages.h"
#include "day0/ops/tensor.h"

namespace day0 {

// ---- embedding: out[t, :] = table[ids[t], :] (dequantised) ----------------------------------------
struct EmbeddingArgs {
  WeightView table;              // [vocab, hidden]
  std::span<const int32_t> ids;  // [T], each in [0, vocab)
  Matrix out;                    // [T, hidden]
};

// ---- matmul: y = x W^T (+ bias) (+ y if accumulate) -----------------------------------------------
struct MatmulArgs {
  ConstMatrix x;                // [T, K]
  WeightView w;                 // [N, K] any WeightFormat
  const float* bias = nullptr;  // [N] or null
  Matrix y;                     // [T, N]; must not alias x
  bool accumulate = false;      // y += x W^T (+ bias) instead of y =
  // true: float32 products of exactly dequantised weights (any blocking / accumulation order).
  // false: the backend may round the activations to BF16 first (the cpu backend's vdpbf16ps GEMM for
  // BF16 weights), what a bf16 reference run computes anyway; INT8 / INT4 weights then take int8
  // activations quantized per 32-column block (ops/int8_activations.h), on every backend.
  bool exact = true;
  // true: each row of y is what a call with that row alone computes (a one-token decode step's kernels),
  // however many rows x has, so that a verification step of several rows matches one-token steps bit for
  // bit. Costs the GEMM's speed at many rows; a backend whose rows never depend on the row count ignores
  // it (the cpu backend's int route for INT8 / INT4 weights: every row has its own dot products).
  bool row_invariant = false;
};

// ---- grouped_matmul: a block-diagonal matmul, `groups` projections side by side ------------------
// With G = groups, K = x.cols, N = w.rows: for g < G,
//   y[:, g N/G .. (g + 1) N/G) = x[:, g K/G .. (g + 1) K/G) W[g N/G .. (g + 1) N/G, :]^T
// W is [N, K/G]: the rows of group g are its own [N/G, K/G] projection (DeepSeek-V4's o_a_proj:
// G = o_groups, N = o_groups * o_lora_rank, x the attention output with each group's heads side by side).
// It is G matmuls over column slices of x and row blocks of W (its decomposition); FP8-block weights need
// N/G a multiple of the block rows.
struct GroupedMatmulArgs {
  ConstMatrix x;  // [T, K]
  WeightView w;   // [N, K/G]
  Matrix y;       // [T, N]; must not alias x
  int64_t groups = 1;
  bool exact = true;           // as MatmulArgs::exact
  bool row_invariant = false;  // as MatmulArgs::row_invariant, for every group
};

// ---- rms_norm: y = x / sqrt(mean(x^2) + eps) * weight (weight may be empty: weightless) ------------
// Per-head norms (q/k norm) pass x as [T * n_heads, head_dim]. y may alias x (in place).
struct RmsNormArgs {
  ConstMatrix x;                  // [R, n]
  std::span<const float> weight;  // [n] or empty
  float eps = 1e-6f;
  Matrix y;  // [R, n]
};

// ---- layer_norm: y = (x - mean) / sqrt(var + eps) * weight + bias (biased variance) --------------
struct LayerNormArgs {
  ConstMatrix x;                  // [R, n]
  std::span<const float> weight;  // [n] or empty
  std::span<const float> bias;    // [n] or empty
  float eps = 1e-5f;
  Matrix y;  // [R, n]; may alias x
};

// ---- rope: rotate the first rotary_dim dims of every head, in place ------------------------------
// theta(p, i) = p * inv_freq[i] in float32 (as HF), cos/sin multiplied by attention_factor.
// kHalfSplit pairs (i, i + rotary_dim/2); kInterleaved pairs (2i, 2i + 1), i counted from rotary_col0.
// The other dims of each head pass through (partial rotary): the rotated ones are the first rotary_dim
// (rotary_col0 = 0), or the last (rotary_col0 = head_dim - rotary_dim, DeepSeek-V4's [nope | rope]
// heads). Negated positions rotate back (cos, -sin: V4's inverse rotation of the attention output).
// inv_freq comes from rope_inv_freq() (ops/rope_table.h).
struct RopeArgs {
  Matrix x;                            // [T, n_heads * head_dim], rotated in place
  std::span<const int64_t> positions;  // [T]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // even, <= head_dim
  RopeLayout layout = RopeLayout::kHalfSplit;
  std::span<const float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.0f;
  int64_t rotary_col0 = 0;  // first rotated dim of each head; rotary_col0 + rotary_dim <= head_dim
};

// ---- attention: causal softmax(q k^T * scale + mask) v with GQA ----------------------------------
// Query row t is at absolute position q_pos0 + t. Key/value row j of the cache is at position
// k_pos0 + j (k_pos0 > 0 when a sliding-window cache dropped old keys); the cache already holds the
// keys of the current tokens (keys are appended before attention, after RoPE).
// Query head h reads kv head h / (n_heads / n_kv_heads). Key j is visible to query position i when
// j <= i, and additionally i - window < j (kSliding) or j / window == i / window (kChunked).
// Sinks: one logit per query head joins the softmax denominator but has no value.
// A query with no visible key (possible only with k_pos0 > its position) gets zeros.
// Block-sparse attention: with `selected_blocks` (a block_indexer_topk output, [T, groups * k]), query
// head h of row t attends only to the visible keys whose block (key position / block_size) is listed in
// entries [g * k, (g + 1) * k) of row t, g = h / (n_heads / groups) (-1 entries unused); empty: every
// visible key.
struct BlockSelection {
  MatrixView<const int32_t> blocks;  // [T, groups * k], or empty (rows == 0)
  int64_t block_size = 0;
  int64_t groups = 0;  // selection groups per row; n_heads is a multiple of it
  bool empty() const { return blocks.rows == 0; }
  int64_t k() const { return groups > 0 ? blocks.cols / groups : 0; }
};
struct AttentionArgs {
  ConstMatrix q;  // [T, n_heads * head_dim]
  ConstMatrix k;  // [S, n_kv_heads * head_dim]  (KV cache, float32)
  ConstMatrix v;  // [S, n_kv_heads * v_head_dim]
  Matrix out;     // [T, n_heads * v_head_dim]
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;    // q/k dim
  int64_t v_head_dim = 0;  // 0 means head_dim
  int64_t q_pos0 = 0;
  int64_t k_pos0 = 0;
  float scale = 0.0f;  // 0 means 1/sqrt(head_dim)
  AttentionMask mask = AttentionMask::kCausal;
  int64_t window = 0;            // sliding window (keys incl. the current one) or chunk size
  std::span<const float> sinks;  // [n_heads] or empty
  BlockSelection selection;      // block-sparse attention, or empty
  // For costing only (kernels read k / v alone): a caller that gathers each row's keys itself
  // (compressed KV attention: its window's raw rows, then compressed entries) says which keys a row
  // reaches, so that a recorded step is costed at a longer context than it ran. Empty: the keys are
  // the positions from k_pos0, under `mask` and `selection`.
  std::optional<KeyReach> reach;
};

// ---- mla_attention: multi-head latent attention over the latent cache -----------------------------
// Inputs are what MLA caches (§6.3): c_kv (after kv_a_layernorm) and k_pe (after RoPE), plus the
// query already split per head as [q_nope ; q_pe] (q_pe after RoPE) and kv_b_proj.
//   kNaive:    expand k_nope = c_kv W_UK[h]^T, v = c_kv W_UV[h]^T for every cached token, then
//              ordinary causal attention with k_h = [k_nope_h ; k_pe].
//   kAbsorbed: q_abs_h = W_UK[h]^T q_nope_h, scores q_abs_h . c_kv + q_pe_h . k_pe, o_h = W_UV[h] sum P c_kv.
// Both forms give the same result; decode uses kAbsorbed.
// Sparse attention: with `selected` (an indexer_topk output), query t attends only to the
// keys listed in row t (key indices j of c_kv / k_pe, -1 entries unused) that the causal mask also
// admits; the others get no weight. Empty: every causal key (dense MLA).
enum class MlaForm { kNaive, kAbsorbed };
struct MlaArgs {
  ConstMatrix q;      // [T, n_heads * (d_nope + d_rope)]
  ConstMatrix c_kv;   // [S, kv_lora_rank]
  ConstMatrix k_pe;   // [S, d_rope]
  WeightView w_kv_b;  // [n_heads * (d_nope + d_v), kv_lora_rank]
  Matrix out;         // [T, n_heads * d_v]
  int64_t n_heads = 0;
  int64_t d_nope = 0;
  int64_t d_rope = 0;
  int64_t d_v = 0;
  int64_t kv_lora_rank = 0;
  int64_t q_pos0 = 0;  // causal: key j (position j) visible to query t iff j <= q_pos0 + t
  float scale = 0.0f;  // softmax scale incl. yarn mscale^2 (required, > 0)
  MlaForm form = MlaForm::kAbsorbed;
  MatrixView<const int32_t> selected;  // [T, k] sparse key selection, or empty (rows == 0)
};

// ---- paged_attention / paged_mla_attention: one call for every sequence of a step ---------------
// The query rows of all sequences are concatenated (varlen): sequence s owns rows
// [q_row0, q_row0 + q_rows) of q and out, at positions q_pos0 ..., and reads its own paged cache
// (ops/kv_pages.h), which already holds this step's keys. Semantics per sequence are exactly
// `attention` / `mla_attention` over the dequantised cache with k_pos0 = kv.pos0 (the reference
// backend computes it that way: it is the oracle).
struct PagedSequence {
  int64_t q_row0 = 0;
  int64_t q_rows = 0;
  int64_t q_pos0 = 0;
  KvPages kv;  // GQA: first = K [.., n_kv_heads * head_dim], second = V; MLA: c_kv and k_pe
};
struct PagedAttentionArgs {
  ConstMatrix q;                        // [T, n_heads * head_dim]
  std::span<const PagedSequence> seqs;  // [B]
  Matrix out;                           // [T, n_heads * v_head_dim]
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;  // 0 means head_dim
  float scale = 0.0f;      // 0 means 1/sqrt(head_dim)
  AttentionMask mask = AttentionMask::kCausal;
  int64_t window = 0;
  std::span<const float> sinks;  // [n_heads] or empty
  BlockSelection selection;      // block-sparse attention (rows of q), or empty: as AttentionArgs
  // For costing only, as AttentionArgs::reach: a block selection narrower than the layer's (cut to the
  // blocks a short step has) says the layer's. Empty: `mask`, `window` and `selection` are.
  std::optional<KeyReach> reach;
};
struct PagedMlaArgs {
  ConstMatrix q;                        // [T, n_heads * (d_nope + d_rope)]
  std::span<const PagedSequence> seqs;  // [B]; first = c_kv [.., kv_lora_rank], second = k_pe [.., d_rope]
  WeightView w_kv_b;                    // [n_heads * (d_nope + d_v), kv_lora_rank]
  Matrix out;                           // [T, n_heads * d_v]
  int64_t n_heads = 0;
  int64_t d_nope = 0;
  int64_t d_rope = 0;
  int64_t d_v = 0;
  int64_t kv_lora_rank = 0;
  float scale = 0.0f;  // required, > 0
  MlaForm form = MlaForm::kAbsorbed;
  // [T, k] sparse key selection (rows of each sequence's cache, indexer_topk), or empty: as MlaArgs.
  MatrixView<const int32_t> selected;
  // For costing only, as AttentionArgs::reach: a selection narrower than the layer's (k is cut to the
  // longest visible length in a short step) says the layer's, so that a recorded step is costed at a
  // longer context. Empty: `selected` is.
  std::optional<KeyReach> reach;
};

// ---- indexer_topk: the sparse-attention lightning indexer, every sequence of a step ---------------
// For query row t of sequence s (position p = q_pos0 + t) and each key row j of its cache that the
// causal mask admits (j <= p; MLA caches keep every position, kv.pos0 = 0):
//   I[t, j] = sum_h weights[t, h] * relu(scale * q[t, h, :] . key[j])        (float32)
// where key[j] is columns [key_col0, key_col0 + head_dim) of the cache's second tensor (MLA: after
// k_pe). selected[t, 0 .. n) = the n = min(topk, p + 1) keys of highest score, highest first (ties:
// lower j first); entries n .. topk - 1 are -1. T = 0 does nothing.
// Compressed keys (key_ratio m > 1, DeepSeek-V4's compressed sparse layers): key row j pools positions
// [j m, (j + 1) m) and is visible to position p once its window is complete, j < (p + 1) / m; then
// n = min(topk, (p + 1) / m).
// ambiguous (optional, [T]): 1 where the selected set depends on the tie rule (the n-th and (n + 1)-th
// highest visible scores are equal, e.g. several rectified to 0), else 0: a reference that breaks ties
// another way may pick other keys there, and only there.
struct IndexerTopkArgs {
  ConstMatrix q;                        // [T, n_heads * head_dim] indexer queries after RoPE
  ConstMatrix weights;                  // [T, n_heads] per-head weights (the caller's scale included)
  std::span<const PagedSequence> seqs;  // [B]
  MatrixView<int32_t> selected;         // [T, topk]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t key_col0 = 0;
  float scale = 0.0f;            // required, > 0 (d^-1/2)
  int64_t key_ratio = 1;         // positions a key row pools (1: one key per position)
  std::span<uint8_t> ambiguous;  // [T] or empty
  // Keys visible to position p among a cache of `length` rows.
  int64_t visible_keys(int64_t p, int64_t length) const { return std::min(length, (p + 1) / key_ratio); }
};

// ---- block_indexer_topk: block-sparse attention's indexer, every sequence of a step ---------------
// For query row t of sequence s (position p = q_pos0 + t; causal caches keep every position, kv.pos0 = 0),
// index head h and each key row j <= p of its cache, in float32:
//   score(h, j) = q[t, h, :] . key[j]     key[j] = columns [key_col0, key_col0 + head_dim) of the second
//   tensor
// Block b (key positions [b * block_size, (b + 1) * block_size)) scores the max of its keys' scores (keys
// past p excluded); the local_blocks blocks p / block_size - i (i < local_blocks, clamped at 0) score
// +inf. With k = selected.cols / n_heads: selected[t, h * k .. h * k + n) = the n = min(k, p / block_size
// + 1) blocks of highest score, highest first (ties: lower block first); entries n .. k - 1 are -1.
// local_blocks <= k. T = 0 does nothing.
struct BlockIndexerTopkArgs {
  ConstMatrix q;                        // [T, n_heads * head_dim] index queries after norm and RoPE
  std::span<const PagedSequence> seqs;  // [B]
  MatrixView<int32_t> selected;         // [T, n_heads * k]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t key_col0 = 0;
  int64_t block_size = 0;
  int64_t local_blocks = 0;
};

// ---- causal_conv1d: the causal depthwise convolution (Gated DeltaNet, Mamba-2), every sequence -----
// Sequence s owns rows [row0, row0 + rows) of x and a window W_s [K - 1, C]: the K - 1 inputs before
// its first row, oldest first (zeros at the sequence start), stored in window_dtype. With u = W_s
// followed by its rows, for its t-th row and channel c (float32):
//   y[row0 + t, c] = act(bias[c] + sum_{m < K} weight[c * K + m] * u[t + m, c]),   act = silu or the
//   identity, bias[c] = 0 when bias is empty
// and afterwards W_s holds the last K - 1 rows of u (converted to window_dtype: BF16 rounds to nearest
// even). y must not overlap x. Sequences with rows = 0 are left as they are; T = 0 does nothing.
struct ConvSequence {
  int64_t row0 = 0;
  int64_t rows = 0;
  void* window = nullptr;  // [K - 1, C] in window_dtype, updated in place
};
struct CausalConv1dArgs {
  ConstMatrix x;                       // [T, C]
  std::span<const float> weight;       // [C * K] channel-major (conv1d.weight [C, 1, K] flattened)
  std::span<const float> bias;         // [C] (Mamba-2's conv1d.bias) or empty
  std::span<const ConvSequence> seqs;  // [B]
  Matrix y;                            // [T, C]
  int64_t kernel = 0;                  // K >= 1
  KvDtype window_dtype = KvDtype::kF32;
  bool silu = true;
};

// ---- gated_delta_rule: the gated delta rule (Gated DeltaNet), every sequence of a step -------------
// Value head j reads key head i = j / (n_value_heads / n_key_heads). For token t of sequence s, in
// order, in float32 (S = the sequence's state for head j, [d_k, d_v], zero at the sequence start):
//   q = q[t, i] / sqrt(|q[t, i]|^2 + 1e-6) / sqrt(d_k),  k = k[t, i] / sqrt(|k[t, i]|^2 + 1e-6)
//       (without l2_normalize: q[t, i] / sqrt(d_k) and k[t, i] as given)
//   gamma = -exp(a_log[j]) * softplus(a[t, j] + dt_bias[j])      softplus(x) = x if x > 20, log1p(e^x)
//   S <- exp(gamma) S;   S <- S + k (beta[t, j] (v[t, j] - S^T k))^T;   out[t, j] = S^T q
// `state` is updated in place ([n_v, d_k, d_v] row-major). out must not overlap the inputs. This is the
// recurrent form, token by token (prefill included): exact, no chunking.
struct DeltaSequence {
  int64_t row0 = 0;
  int64_t rows = 0;
  float* state = nullptr;  // [n_value_heads, key_head_dim, value_head_dim]
};
struct GatedDeltaRuleArgs {
  ConstMatrix q;                          // [T, n_k * d_k]
  ConstMatrix k;                          // [T, n_k * d_k]
  ConstMatrix v;                          // [T, n_v * d_v]
  ConstMatrix a;                          // [T, n_v] decay input (before dt_bias)
  ConstMatrix beta;                       // [T, n_v] update strength (after the sigmoid)
  std::span<const float> a_log, dt_bias;  // [n_v] each
  std::span<const DeltaSequence> seqs;    // [B]
  Matrix out;                             // [T, n_v * d_v]
  int64_t n_key_heads = 0;
  int64_t n_value_heads = 0;
  int64_t key_head_dim = 0;
  int64_t value_head_dim = 0;
  bool l2_normalize = true;
};

// ---- ssm_scan: Mamba-2's selective state-space scan, every sequence of a step ------------------------
// Head h reads group g = h / (n_heads / n_groups). For token t of sequence s, in order, in float32 (S =
// the sequence's state for head h, [head_dim, state_size], zero at the sequence start):
//   decay = exp(-exp(a_log[h]) * dt[t, h])
//   S <- decay S + dt[t, h] x[t, h] b[t, g]^T;    y[t, h] = S c[t, g] + d[h] x[t, h]   (d empty: no skip)
// dt is the step after dt_bias, softplus and the time-step limits (the caller's, so that it rounds where
// the model rounds). `state` is updated in place ([n_heads, head_dim, state_size] row-major, the layout
// of transformers' recurrent state). y must not overlap the inputs. This is the recurrence token by
// token for prefill too: the chunked SSD form is the same sums regrouped for parallel hardware.
struct SsmScanArgs {
  ConstMatrix x;                        // [T, n_heads * head_dim]
  ConstMatrix dt;                       // [T, n_heads] > 0
  ConstMatrix b;                        // [T, n_groups * state_size]
  ConstMatrix c;                        // [T, n_groups * state_size]
  std::span<const float> a_log;         // [n_heads]
  std::span<const float> d;             // [n_heads] or empty
  std::span<const DeltaSequence> seqs;  // [B], state [n_heads, head_dim, state_size]
  Matrix y;                             // [T, n_heads * head_dim]
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_groups = 0;
  int64_t state_size = 0;
};

// ---- gated_rms_norm: y = weight * (x / sqrt(mean(x^2) + eps)) * silu(z), row by row (float32) -----
// Gated DeltaNet's output norm, per value head: x and z [R, n] (R = tokens * heads). y may alias x.
struct GatedRmsNormArgs {
  ConstMatrix x;                  // [R, n]
  ConstMatrix z;                  // [R, n] the gate
  std::span<const float> weight;  // [n]
  float eps = 1e-6f;
  Matrix y;  // [R, n]
};

// ---- kv_write: store a step's K/V (or MLA latent / rope key) rows in their KV cache slots --------
// Row r of `first` / `second` goes to row slots[r] % block_tokens of block slots[r] / block_tokens of
// the pool, converted to the pool's dtype (BF16: round to nearest even; FP8 E4M3: round to nearest
// even, saturating at +-448, NaN stays NaN; F32: copied). Slots are distinct and below
// n_blocks * block_tokens. Views and pool live in the backend's memory space.
struct KvWriteArgs {
  ConstMatrix first;               // [R, pool.first_width]
  ConstMatrix second;              // [R, pool.second_width]
  std::span<const int64_t> slots;  // [R]
  KvBlockTable pool;
};

// ---- kv_copy_blocks: copy on write; the first rows[i] rows of block src[i] into block dst[i] ------
// Both tensors of the block, bytes as stored. Copies apply in order (a later copy may read a block an
// earlier one wrote); src[i] != dst[i].
struct KvCopyBlocksArgs {
  std::span<const int32_t> src;   // [n] block ids
  std::span<const int32_t> dst;   // [n] block ids
  std::span<const int32_t> rows;  // [n] each in [0, pool.block_tokens]
  KvBlockTable pool;
};

// ---- softmax over each row, in place --------------------------------------------------------------
struct SoftmaxArgs {
  Matrix x;  // [R, C]
};

// ---- elementwise unary: silu, gelu, sigmoid, tanh, softplus (log(1 + e^x), x itself above 20, as
// torch's threshold). y may alias x. ---------------------------------------
enum class GeluApprox { kErf, kTanh };
struct UnaryArgs {
  ConstMatrix x;
  Matrix y;                            // same shape as x
  GeluApprox gelu = GeluApprox::kErf;  // gelu only
};

// ---- swiglu: out = silu(gate) * up; swiglu_clamped (swiglu_limit):
//   g = min(gate, limit); u = clamp(up, -limit, limit); out = (u + up_shift) * g * sigmoid(alpha * g).
//   gpt-oss: alpha 1.702, up_shift 1; DeepSeek-V4: alpha 1, up_shift 0 (silu(g) * u, the plain clamp).
// Gate and up are two views (e.g. halves of a fused [T, 2I] projection) or, with interleaved = true,
// `gate` is [T, 2I] holding gate at even and up at odd columns and `up` is unused.
struct SwigluArgs {
  ConstMatrix gate;  // [T, I] ([T, 2I] when interleaved)
  ConstMatrix up;    // [T, I]
  Matrix out;        // [T, I]
  bool interleaved = false;
  float limit = 7.0f;     // clamped only
  float alpha = 1.702f;   // clamped only
  float up_shift = 1.0f;  // clamped only
};

// ---- add / mul: out = a (+|*) b elementwise; b may be one row broadcast over a's rows. ------------
// out may alias a or b.
struct BinaryArgs {
  ConstMatrix a;  // [R, C]
  ConstMatrix b;  // [R, C], or [1, C] broadcast over rows, or [R, 1] over columns, or [1, 1] over all
  Matrix out;     // [R, C]
};

// ---- moe_router: expert selection and weights from router logits -----------------------------------
// logits = x W_router^T (+ router bias) is a matmul done before. For each token:
//  scores = softmax(logits), sigmoid(logits) or sqrt(softplus(logits)) (softplus: x itself past 20)
//           (kGreedy, kGroupLimitedGreedy, kNoauxTc)
//  select = scores + correction_bias (kNoauxTc only; selection only), group masking (n_group groups;
//           group score = max (kGroupLimitedGreedy) or sum of top-2 (kNoauxTc); keep topk_group
//           groups, masked experts can never be chosen), top-k of select (ties: lower index first)
//  weights = scores[idx]; if norm_topk_prob: w /= (sum w + renorm_eps); w *= routed_scaling_factor.
// kLogitsThenSoftmax: top-k on logits, weights = softmax over the k selected logits.
// kLogitsThenSigmoid: top-k on logits, weights = sigmoid of the selected logits.
// Indices are written in descending order of the selection score.
// Hash routing (a hash_table): the picks of token t are hash_table[token_ids[t]], in table order, with
// no selection (no correction bias, no groups); their weights are the scores of those picks, as above.
struct MoeRouterArgs {
  ConstMatrix logits;                      // [T, E]
  std::span<const float> correction_bias;  // [E] (kNoauxTc) or empty
  RouterScoring scoring = RouterScoring::kSoftmax;
  TopkMethod method = TopkMethod::kGreedy;
  int64_t top_k = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  float renorm_eps = 0.0f;  // 1e-20 with float32 router logits (router_logits_f32)
  float routed_scaling_factor = 1.0f;
  // [E] or empty: each picked expert's weight also times its own scale, after the normalization.
  std::span<const float> expert_scale;
  MatrixView<int32_t> expert_ids;        // [T, top_k]
  Matrix expert_weights;                 // [T, top_k]
  MatrixView<const int32_t> hash_table;  // [vocab, top_k] token id -> experts (tid2eid), or empty
  std::span<const int32_t> token_ids;    // [T] with a hash table
  bool hashed() const { return hash_table.rows > 0; }
};

// ---- moe_experts: dispatch tokens to their experts, expert SwiGLU MLPs, weighted combine ----------
// out[t] (+)= sum_k w[t,k] * Expert_{ids[t,k]}(x[t])   (input_scaling: Expert(w * x[t]) unweighted)
// Ids in [E, E + n_zero_experts) are zero-computation experts: Expert(x) = x.
// Expert_e(x) = down_e( act(gate_e x + b, up_e x + b) ) + down_bias, or with relu2 the ungated
// down_e( relu(up_e x + b)^2 ) + down_bias (gate absent, layout kSeparate). An expert with zero tokens costs
// nothing. Gate/up are either two weights or one fused weight `gate_up` [2I, H] whose rows are
// interleaved (gate = even rows) or concatenated (gate = first I rows).
enum class GateUpLayout { kSeparate, kInterleaved, kConcatenated };
struct ExpertWeights {
  WeightView gate;                   // [I, H], or the fused [2I, H] for the fused layouts
  WeightView up;                     // [I, H] (kSeparate only)
  WeightView down;                   // [H, I]
  const float* gate_bias = nullptr;  // [I] ([2I] fused, same row order as the weight) or null
  const float* up_bias = nullptr;    // [I] (kSeparate only) or null
  const float* down_bias = nullptr;  // [H] or null
};
struct MoeExpertsArgs {
  ConstMatrix x;  // [T, H]
  // [T, k], each in [0, routed_experts() + n_zero_experts), or kPickedElsewhere.
  MatrixView<const int32_t> expert_ids;
  ConstMatrix expert_weights;              // [T, k]
  std::span<const ExpertWeights> experts;  // [slots held]: the experts this call may compute
  // Expert parallelism: `experts` holds some of the model's n_experts (0: experts.size(), all of them,
  // in order); expert_slot [n_experts] gives each expert's index in `experts`, -1 where another rank
  // holds it (empty: `experts` is every expert in order). Picks of experts not held here, and picks
  // marked kPickedElsewhere (another copy of a replicated expert computes them), add nothing here.
  // Zero-expert picks are added by every call: a caller that sums calls over ranks gives them weight 0
  // on all ranks but one.
  static constexpr int32_t kPickedElsewhere = -1;
  std::span<const int32_t> expert_slot;
  int64_t n_experts = 0;
  int64_t routed_experts() const { return n_experts > 0 ? n_experts : static_cast<int64_t>(experts.size()); }
  // The index in `experts` that computes routed expert `id` here, or -1 (held elsewhere, or not a
  // routed expert: kPickedElsewhere or a zero-computation expert).
  int64_t slot_of(int64_t id) const {
    if (id < 0 || id >= routed_experts()) return -1;
    return expert_slot.empty() ? id : expert_slot[static_cast<size_t>(id)];
  }
  GateUpLayout layout = GateUpLayout::kSeparate;
  bool clamped = false;    // clamped SwiGLU (limit, alpha, up_shift: as swiglu_clamped)
  bool relu2 = false;      // ungated relu(up x)^2 experts (Nemotron-H)
  bool gelu_tanh = false;  // GEGLU experts: gelu_tanh(gate x) * up x (tanh-approximated GELU)
  float limit = 7.0f;
  float alpha = 1.702f;
  float up_shift = 1.0f;
  bool input_scaling = false;  // kLogitsThenSigmoid: scale the input, not the output
  int64_t n_zero_experts = 0;  // identity experts numbered after the real ones
  Matrix out;                  // [T, H]
  bool accumulate = false;     // out += instead of out =
  bool exact = true;           // as MatmulArgs::exact, for every expert matmul
  bool row_invariant = false;  // as MatmulArgs::row_invariant, for every expert
};

// ---- kv_compress: compressed attention's learned gated pooling of every m = ratio tokens ----------
// Rows [w m, (w + 1) m) of kv and gate are the tokens of complete window w (the caller keeps the tail
// that is not yet a window). Per channel c, in float32 (softmax over the window's slots):
//   no overlap (C = d):  out[w, c] = sum_i softmax_i(gate[w m + i, c] + bias[i, c]) kv[w m + i, c]
//   overlap (C = 2d, DeepSeek-V4's compressed sparse layers): 2m slots, the previous window's first
//   halves then this window's second halves:
//     slot i     = kv[(w - 1) m + i, c],     gate[(w - 1) m + i, c] + bias[i, c]
//     slot m + i = kv[w m + i, d + c],       gate[w m + i, d + c] + bias[i, d + c]
//   For w = 0 the first m slots are prior_kv / prior_gate (the previous call's last window: its kv
//   and biased gate, first halves), or absent (weight 0) when those are empty.
// The caller then applies the entry's RMSNorm and RoPE at position w m + (the first window's position).
// bf16_steps: the rounding of transformers' bfloat16 run (kv in bfloat16, gate + bias and the softmax in
// float32): each softmax weight, each weight * kv and the window's float32 sum rounded to BF16.
struct KvCompressArgs {
  ConstMatrix kv;             // [W m, C]
  ConstMatrix gate;           // [W m, C]
  ConstMatrix position_bias;  // [m, C]
  ConstMatrix prior_kv;       // [m, d] or empty (overlap only)
  ConstMatrix prior_gate;     // [m, d] or empty, bias included
  int64_t ratio = 4;
  bool overlap = false;
  Matrix out;  // [W, d]
  bool bf16_steps = false;
};

// ---- hyper-connections (mHC): n residual streams per token, mixed into a layer and back ------------
// The streams of a token are one row [n * H] (stream j = columns [j H, (j + 1) H)). Per token, in
// float32 from the streams' projection mixes = rms(streams) W_fn^T (a weightless rms_norm over all
// n H columns and a matmul before this op):
// hc_weights:
//   pre[j]  = sigmoid(mixes[j] scale[0] + base[j]) + eps
//   post[j] = 2 sigmoid(mixes[n + j] scale[1] + base[n + j])
//   c[i, j] = softmax over j of (mixes[2n + i n + j] scale[2] + base[2n + i n + j]), + eps
//   Sinkhorn-Knopp: c[i, j] /= (sum_i c[i, j] + eps); then sinkhorn_iters - 1 times
//   c[i, j] /= (sum_j c[i, j] + eps) and c[i, j] /= (sum_i c[i, j] + eps); comb = c, row-major.
//   The final collapse (the head) has mixes [T, n], base [n], scale [1] and gives pre only (post and
//   comb empty views).
// hc_collapse: out[t] = sum_j pre[t, j] streams[t, j]              (the layer's input, [T, H])
// hc_expand:   out[t, k] = post[t, k] x[t] + sum_j comb[t, j, k] streams[t, j]   (x: the layer's output)
// bf16_steps (hc_expand): the rounding of transformers' bfloat16 run: post and comb rounded to BF16,
// post x rounded, the sum over j (float32) rounded, their sum rounded. hc_collapse's float32 sum is
// rounded once by the caller (round_bf16). Outputs never alias inputs.
struct HcWeightsArgs {
  ConstMatrix mixes;             // [T, (2 + n) n], or [T, n] for the head
  std::span<const float> base;   // [(2 + n) n] or [n]
  std::span<const float> scale;  // [3] or [1]
  int64_t n_streams = 0;
  int64_t sinkhorn_iters = 20;  // >= 1
  float eps = 1e-6f;
  Matrix pre;   // [T, n]
  Matrix post;  // [T, n], or empty (head)
  Matrix comb;  // [T, n * n], or empty (head)
  bool head() const { return mixes.cols == n_streams; }
};
struct HcCollapseArgs {
  ConstMatrix streams;  // [T, n * H]
  ConstMatrix pre;      // [T, n]
  Matrix out;           // [T, H]
  int64_t n_streams = 0;
};
struct HcExpandArgs {
  ConstMatrix x;        // [T, H]
  ConstMatrix streams;  // [T, n * H]
  ConstMatrix post;     // [T, n]
  ConstMatrix comb;     // [T, n * n]
  Matrix out;           // [T, n * H]
  int64_t n_streams = 0;
  bool bf16_steps = false;
};

// ---- argmax over each row: lowest index among equal maxima -----------------------------------------
struct ArgmaxArgs {
  ConstMatrix x;           // [R, C]
  std::span<int32_t> out;  // [R]
};

// ---- sample: one token per row from softmax(logits / temperature), nucleus top_p, top_k ------------
// temperature <= 0 means argmax. The draw is a deterministic function of (logits, params, seed, row):
// every backend returns the same tokens for the same inputs. Candidates are sorted by probability
// (descending, ties by lower index), the smallest prefix whose mass >= top_p is kept (top_k first
// if > 0), and u = uniform(seed, row) in [0, 1) picks by cumulative renormalised mass.
struct SampleArgs {
  ConstMatrix logits;  // [R, V]
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0: no top-k cut
  uint64_t seed = 0;
  std::span<int32_t> out;  // [R]
};

// ---- primitives (targets of decompositions) ---------------------------------------------------------
// clamp: y = min(max(x, lo), hi); scale: y = x * scale + shift; rsqrt: y = 1 / sqrt(x + eps).
// y may alias x. For row_mean, y is [R, 1]: y[r] = mean over the columns of x[r].
struct PointwiseArgs {
  ConstMatrix x;
  Matrix y;
  float lo = -INFINITY;  // clamp
  float hi = INFINITY;   // clamp
  float scale = 1.0f;    // scale
  float shift = 0.0f;    // scale
  float eps = 0.0f;      // rsqrt
};
// copy_columns: for every row r, group g < groups and j < width,
//   y[r, y_col0 + g * y_stride + j] = x[r, x_col0 + g * x_stride + j].
// Gathers one part of every head into a dense matrix (x_stride = head width, y_stride = width) or
// scatters it back. x and y must not overlap.
struct CopyColumnsArgs {
  ConstMatrix x;  // [R, Cx]
  Matrix y;       // [R, Cy]
  int64_t groups = 1;
  int64_t width = 0;  // columns per group
  int64_t x_col0 = 0;
  int64_t x_stride = 0;  // columns between the starts of consecutive groups in x
  int64_t y_col0 = 0;
  int64_t y_stride = 0;
};
// gather_rows: y[i, :] = x[idx[i], :].
struct GatherRowsArgs {
  ConstMatrix x;                 // [N, C]
  std::span<const int32_t> idx;  // [n], each in [0, N)
  Matrix y;                      // [n, C]
};
// scatter_add: y[idx[i], :] += weight[i] * x[i, :] (weight empty: 1). Rows are applied in order i.
struct ScatterAddArgs {
  ConstMatrix x;                  // [n, C]
  std::span<const int32_t> idx;   // [n], each in [0, N)
  std::span<const float> weight;  // [n] or empty
  Matrix y;                       // [N, C]
};

// The uniform draw used by `sample` (splitmix64 of seed and row), exposed for tests.
double sample_uniform(uint64_t seed, int64_t row);

}  // namespace day0
