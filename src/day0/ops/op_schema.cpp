#include "day0/ops/op_schema.h"

#include <fmt/format.h>

#include "day0/ops/op_names.h"

namespace day0 {

namespace {

using Shapes = std::span<const Shape>;
using Out = Result<std::vector<Shape>>;

std::string dims(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

Status expect_rank(Shapes in, size_t index, size_t rank, std::string_view op) {
  if (in.size() <= index) return invalid_argument(fmt::format("{}: missing input {}", op, index));
  if (in[index].size() != rank) {
    return invalid_argument(
        fmt::format("{}: input {} expected rank {}, found {}", op, index, rank, dims(in[index])));
  }
  return Status::ok();
}

double attr(const OpAttributes& a, std::string_view name, double fallback = 0.0) {
  auto it = a.find(name);
  return it == a.end() ? fallback : it->second;
}

Out same_as_first(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "elementwise"));
  return std::vector<Shape>{in[0]};
}

Out binary_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "binary"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "binary"));
  const Shape& a = in[0];
  const Shape& b = in[1];
  const bool ok = (b == a) || (b[0] == 1 && b[1] == a[1]) || (b[0] == a[0] && b[1] == 1);
  if (!ok) return invalid_argument(fmt::format("binary: {} does not broadcast to {}", dims(b), dims(a)));
  return std::vector<Shape>{a};
}

Out embedding_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "embedding"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 1, "embedding"));
  return std::vector<Shape>{{in[1][0], in[0][1]}};
}

Out matmul_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "matmul"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "matmul"));
  if (in[0][1] != in[1][1]) {
    return invalid_argument(fmt::format("matmul: x {} and W {} disagree on K", dims(in[0]), dims(in[1])));
  }
  return std::vector<Shape>{{in[0][0], in[1][0]}};
}

Out grouped_matmul_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "grouped_matmul"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "grouped_matmul"));
  const auto g = static_cast<int64_t>(attr(a, "groups", 1.0));
  if (g <= 0 || in[1][0] % g != 0 || in[0][1] != g * in[1][1]) {
    return invalid_argument(
        fmt::format("grouped_matmul: x {} and W {} in {} groups", dims(in[0]), dims(in[1]), g));
  }
  return std::vector<Shape>{{in[0][0], in[1][0]}};
}

Out norm_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "norm"));
  if (in.size() > 1 && !(in[1].size() == 1 && in[1][0] == in[0][1])) {
    return invalid_argument(fmt::format("norm: weight {} for x {}", dims(in[1]), dims(in[0])));
  }
  return std::vector<Shape>{in[0]};
}

Out attention_shape(Shapes in, const OpAttributes& a) {
  for (size_t i = 0; i < 3; ++i) D0_RETURN_IF_ERROR(expect_rank(in, i, 2, "attention"));
  const auto n_heads = static_cast<int64_t>(attr(a, "n_heads"));
  const auto n_kv = static_cast<int64_t>(attr(a, "n_kv_heads"));
  if (n_heads <= 0 || n_kv <= 0 || n_heads % n_kv != 0 || in[0][1] % n_heads != 0 || in[2][1] % n_kv != 0) {
    return invalid_argument("attention: n_heads must be a multiple of n_kv_heads dividing q and v widths");
  }
  if (in[1][0] != in[2][0]) return invalid_argument("attention: k and v row counts differ");
  return std::vector<Shape>{{in[0][0], n_heads * (in[2][1] / n_kv)}};
}

Out mla_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "mla_attention"));
  const auto n_heads = static_cast<int64_t>(attr(a, "n_heads"));
  const auto d_v = static_cast<int64_t>(attr(a, "d_v"));
  if (n_heads <= 0 || d_v <= 0) return invalid_argument("mla_attention: n_heads and d_v must be positive");
  return std::vector<Shape>{{in[0][0], n_heads * d_v}};
}

Out swiglu_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "swiglu"));
  if (attr(a, "interleaved") != 0.0) {
    if (in[0][1] % 2 != 0) return invalid_argument("swiglu: interleaved gate_up needs an even width");
    return std::vector<Shape>{{in[0][0], in[0][1] / 2}};
  }
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "swiglu"));
  if (in[0] != in[1])
    return invalid_argument(fmt::format("swiglu: gate {} vs up {}", dims(in[0]), dims(in[1])));
  return std::vector<Shape>{in[0]};
}

Out router_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "moe_router"));
  const auto k = static_cast<int64_t>(attr(a, "top_k"));
  if (k <= 0 || k > in[0][1])
    return invalid_argument(fmt::format("moe_router: top_k {} of {} experts", k, in[0][1]));
  return std::vector<Shape>{{in[0][0], k}, {in[0][0], k}};
}

Out indexer_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "indexer_topk"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "indexer_topk"));
  const auto k = static_cast<int64_t>(attr(a, "topk"));
  if (k <= 0) return invalid_argument(fmt::format("indexer_topk: topk {}", k));
  if (in[1][0] != in[0][0]) return invalid_argument("indexer_topk: weights rows differ from q rows");
  return std::vector<Shape>{{in[0][0], k}};
}

Out block_indexer_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "block_indexer_topk"));
  const auto n_heads = static_cast<int64_t>(attr(a, "n_heads"));
  const auto k = static_cast<int64_t>(attr(a, "topk_blocks"));
  if (n_heads <= 0 || k <= 0 || in[0][1] % n_heads != 0) {
    return invalid_argument(
        fmt::format("block_indexer_topk: {} heads, top-{} blocks over q {}", n_heads, k, dims(in[0])));
  }
  return std::vector<Shape>{{in[0][0], n_heads * k}};
}

Out gated_delta_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 2, 2, "gated_delta_rule"));
  const auto hv = static_cast<int64_t>(attr(a, "n_value_heads")),
             dv = static_cast<int64_t>(attr(a, "value_head_dim"));
  if (hv <= 0 || dv <= 0 || in[2][1] != hv * dv) return invalid_argument("gated_delta_rule: v width");
  return std::vector<Shape>{in[2]};
}

Out ssm_scan_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "ssm_scan"));
  const auto nh = static_cast<int64_t>(attr(a, "n_heads")), p = static_cast<int64_t>(attr(a, "head_dim"));
  if (nh <= 0 || p <= 0 || in[0][1] != nh * p) return invalid_argument("ssm_scan: x width");
  return std::vector<Shape>{in[0]};
}

Out experts_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "moe_experts"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "moe_experts"));
  if (in[1][0] != in[0][0]) return invalid_argument("moe_experts: expert_ids rows differ from x rows");
  return std::vector<Shape>{in[0]};
}

// kv_compress: kv [W m, C] -> [W, C] (or [W, C / 2] with overlap).
Out kv_compress_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "kv_compress"));
  const auto m = static_cast<int64_t>(attr(a, "ratio"));
  const bool overlap = attr(a, "overlap") != 0.0;
  if (m <= 0 || in[0][0] % m != 0 || (overlap && in[0][1] % 2 != 0)) {
    return invalid_argument(fmt::format("kv_compress: kv {} in windows of {}{}", dims(in[0]), m,
                                        overlap ? " (overlap: even width)" : ""));
  }
  return std::vector<Shape>{{in[0][0] / m, overlap ? in[0][1] / 2 : in[0][1]}};
}

// hc_weights: mixes [T, (2 + n) n] (or [T, n], the head) -> pre [T, n], post [T, n], comb [T, n n].
Out hc_weights_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "hc_weights"));
  const auto n = static_cast<int64_t>(attr(a, "n_streams"));
  const int64_t t = in[0][0];
  if (n > 0 && in[0][1] == n) return std::vector<Shape>{{t, n}};
  if (n <= 0 || in[0][1] != (2 + n) * n) {
    return invalid_argument(fmt::format("hc_weights: mixes {} for {} streams", dims(in[0]), n));
  }
  return std::vector<Shape>{{t, n}, {t, n}, {t, n * n}};
}

// hc_collapse: streams [T, n H], pre [T, n] -> [T, H]; hc_expand: x [T, H], streams [T, n H] -> [T, n H].
Out hc_collapse_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "hc_collapse"));
  const auto n = static_cast<int64_t>(attr(a, "n_streams"));
  if (n <= 0 || in[0][1] % n != 0) {
    return invalid_argument(fmt::format("hc_collapse: streams {} for {} streams", dims(in[0]), n));
  }
  return std::vector<Shape>{{in[0][0], in[0][1] / n}};
}

Out hc_expand_shape(Shapes in, const OpAttributes& a) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "hc_expand"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "hc_expand"));
  const auto n = static_cast<int64_t>(attr(a, "n_streams"));
  if (n <= 0 || in[1] != Shape{in[0][0], n * in[0][1]}) {
    return invalid_argument(
        fmt::format("hc_expand: x {} and streams {} for {} streams", dims(in[0]), dims(in[1]), n));
  }
  return std::vector<Shape>{in[1]};
}

Out per_row_index(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "argmax/sample"));
  return std::vector<Shape>{{in[0][0]}};
}

Out row_mean_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "row_mean"));
  return std::vector<Shape>{{in[0][0], 1}};
}

Out gather_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "gather_rows"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 1, "gather_rows"));
  return std::vector<Shape>{{in[1][0], in[0][1]}};
}

Out kv_write_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "kv_write"));
  D0_RETURN_IF_ERROR(expect_rank(in, 1, 2, "kv_write"));
  D0_RETURN_IF_ERROR(expect_rank(in, 2, 1, "kv_write"));
  if (in[0][0] != in[1][0] || in[0][0] != in[2][0]) return invalid_argument("kv_write: row counts differ");
  return std::vector<Shape>{};  // writes the pool in place
}

Out kv_copy_shape(Shapes in, const OpAttributes&) {
  for (size_t i = 0; i < 3; ++i) D0_RETURN_IF_ERROR(expect_rank(in, i, 1, "kv_copy_blocks"));
  if (in[0][0] != in[1][0] || in[0][0] != in[2][0])
    return invalid_argument("kv_copy_blocks: list sizes differ");
  return std::vector<Shape>{};
}

Out scatter_shape(Shapes in, const OpAttributes&) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "scatter_add"));
  D0_RETURN_IF_ERROR(expect_rank(in, 2, 2, "scatter_add"));
  if (in[0][1] != in[2][1]) return invalid_argument("scatter_add: column counts differ");
  return std::vector<Shape>{in[2]};
}

// copy_columns writes into a y of `y_cols` columns that the caller chose.
Out copy_columns_shape(Shapes in, const OpAttributes& attrs) {
  D0_RETURN_IF_ERROR(expect_rank(in, 0, 2, "copy_columns"));
  auto attr = [&](std::string_view name) {
    const auto it = attrs.find(name);
    return it == attrs.end() ? int64_t{0} : static_cast<int64_t>(it->second);
  };
  const int64_t groups = attr("groups"), width = attr("width"), y_cols = attr("y_cols");
  if (groups > 0 && width > 0) {
    if (attr("x_col0") + (groups - 1) * attr("x_stride") + width > in[0][1])
      return invalid_argument("copy_columns: the column groups run past x");
    if (attr("y_col0") + (groups - 1) * attr("y_stride") + width > y_cols)
      return invalid_argument("copy_columns: the column groups run past y");
  }
  return std::vector<Shape>{{in[0][0], y_cols}};
}

std::vector<OpSchema> build_table() {
  using namespace op;
  return {
      {kEmbedding,
       "rows of a (quantised) table",
       {"table [V, H] weight", "ids [T] i32"},
       {"out [T, H]"},
       {},
       true,
       false,
       embedding_shape,
       {}},
      {kMatmul,
       "y = x W^T (+ b)",
       {"x [T, K]", "w [N, K] weight", "bias [N]?"},
       {"y [T, N]"},
       {"accumulate"},
       true,
       false,
       matmul_shape,
       {}},
      {kGroupedMatmul,
       "block-diagonal y = x W^T: each group of x's columns through its own block of W's rows",
       {"x [T, G*K]", "w [G*N, K] weight"},
       {"y [T, G*N]"},
       {"groups"},
       true,
       false,
       grouped_matmul_shape,
       {kMatmul}},
      {kRmsNorm,
       "x / rms(x) * w",
       {"x [R, n]", "weight [n]?"},
       {"y [R, n]"},
       {"eps"},
       false,
       false,
       norm_shape,
       {kMul, kRowMean, kRsqrt}},
      {kLayerNorm,
       "(x - mean) / std * w + b",
       {"x [R, n]", "weight [n]?", "bias [n]?"},
       {"y [R, n]"},
       {"eps"},
       false,
       false,
       norm_shape,
       {kRowMean, kScale, kAdd, kMul, kRsqrt}},
      {kRope,
       "rotary position embedding, in place",
       {"x [T, heads*d]", "positions [T]", "inv_freq [D_r/2]"},
       {"x [T, heads*d]"},
       {"n_heads", "head_dim", "rotary_dim", "layout", "attention_factor", "rotary_col0"},
       false,
       false,
       same_as_first,
       {}},
      {kAttention,
       "causal GQA attention: sliding/chunked mask, sinks, KV cache",
       {"q [T, H*d]", "k [S, Hkv*d]", "v [S, Hkv*dv]", "sinks [H]?"},
       {"out [T, H*dv]"},
       {"n_heads", "n_kv_heads", "scale", "mask", "window", "q_pos0", "k_pos0"},
       false,
       false,
       attention_shape,
       {}},
      {kMlaAttention,
       "multi-head latent attention (naive / absorbed)",
       {"q [T, H*(dn+dr)]", "c_kv [S, r]", "k_pe [S, dr]", "w_kv_b [H*(dn+dv), r] weight"},
       {"out [T, H*dv]"},
       {"n_heads", "d_nope", "d_rope", "d_v", "scale", "form"},
       true,
       false,
       mla_shape,
       {kMatmul, kScale, kAttention, kGatherRows}},
      {kPagedAttention,
       "attention over a paged KV cache, every sequence of a step in one call (varlen)",
       {"q [T, H*d]", "k pages [S, Hkv*d]", "v pages [S, Hkv*dv]", "sinks [H]?"},
       {"out [T, H*dv]"},
       {"n_heads", "n_kv_heads", "scale", "mask", "window"},
       false,
       false,
       attention_shape,
       {kAttention}},
      {kPagedMlaAttention,
       "MLA over a paged latent cache, every sequence of a step in one call (varlen)",
       {"q [T, H*(dn+dr)]", "c_kv pages [S, r]", "k_pe pages [S, dr]", "w_kv_b [H*(dn+dv), r] weight"},
       {"out [T, H*dv]"},
       {"n_heads", "d_nope", "d_rope", "d_v", "scale", "form"},
       true,
       false,
       mla_shape,
       {kMlaAttention}},
      {kIndexerTopk,
       "DSA lightning indexer: sum_h w_h relu(q_h . k) over a paged cache, causal top-k per query",
       {"q [T, H*D]", "weights [T, H]", "index key pages [S, D]"},
       {"selected [T, topk] i32"},
       {"n_heads", "head_dim", "topk"},
       false,
       false,
       indexer_shape,
       {}},
      {kBlockIndexerTopk,
       "block-sparse indexer: max over each key block of q_h . k over a paged cache, top-k blocks (local "
       "blocks first) per query and head",
       {"q [T, H*D]", "index key pages [S, D]"},
       {"selected [T, H*topk] i32"},
       {"n_heads", "head_dim", "block_size", "topk_blocks", "local_blocks"},
       false,
       false,
       block_indexer_shape,
       {}},
      {kCausalConv1d,
       "causal depthwise conv over a per-sequence window of K-1 inputs, bias, silu (GDN, Mamba-2)",
       {"x [T, C]", "weight [C*K]", "bias [C]", "window [K-1, C] per sequence"},
       {"y [T, C]", "window [K-1, C] per sequence"},
       {"kernel", "silu"},
       false,
       false,
       same_as_first,
       {}},
      {kGatedDeltaRule,
       "gated delta rule recurrence over a per-sequence float32 state (Gated DeltaNet)",
       {"q [T, Hk*dk]", "k [T, Hk*dk]", "v [T, Hv*dv]", "a [T, Hv]", "beta [T, Hv]", "a_log [Hv]",
        "dt_bias [Hv]", "state [Hv, dk, dv] per sequence"},
       {"out [T, Hv*dv]", "state [Hv, dk, dv] per sequence"},
       {"n_key_heads", "n_value_heads", "key_head_dim", "value_head_dim", "l2_normalize"},
       false,
       false,
       gated_delta_shape,
       {}},
      {kSsmScan,
       "selective state-space scan over a per-sequence float32 state (Mamba-2)",
       {"x [T, H*P]", "dt [T, H]", "b [T, G*N]", "c [T, G*N]", "a_log [H]", "d [H]",
        "state [H, P, N] per sequence"},
       {"y [T, H*P]", "state [H, P, N] per sequence"},
       {"n_heads", "head_dim", "n_groups", "state_size"},
       false,
       false,
       ssm_scan_shape,
       {}},
      {kGatedRmsNorm,
       "x / rms(x) * w * silu(z) (Gated DeltaNet output norm)",
       {"x [R, n]", "z [R, n]", "weight [n]"},
       {"y [R, n]"},
       {"eps"},
       false,
       false,
       same_as_first,
       {kRmsNorm, kSilu, kMul}},
      {kSoftmax, "row softmax, in place", {"x [R, C]"}, {"x [R, C]"}, {}, false, false, same_as_first, {}},
      {kSilu, "x * sigmoid(x)", {"x [R, C]"}, {"y [R, C]"}, {}, false, false, same_as_first, {}},
      {kGelu, "gelu (erf or tanh)", {"x [R, C]"}, {"y [R, C]"}, {"approx"}, false, false, same_as_first, {}},
      {kSigmoid, "1 / (1 + e^-x)", {"x [R, C]"}, {"y [R, C]"}, {}, false, false, same_as_first, {}},
      {kSoftplus, "log(1 + e^x), x past 20", {"x [R, C]"}, {"y [R, C]"}, {}, false, false, same_as_first, {}},
      {kTanh, "tanh(x)", {"x [R, C]"}, {"y [R, C]"}, {}, false, false, same_as_first, {}},
      {kSwiglu,
       "silu(gate) * up",
       {"gate [T, I]", "up [T, I]"},
       {"out [T, I]"},
       {"interleaved"},
       false,
       false,
       swiglu_shape,
       {kSilu, kMul}},
      {kSwigluClamped,
       "clamped SwiGLU: (clamp(up) + up_shift) * g * sigmoid(alpha g), g = min(gate, limit)",
       {"gate [T, I]", "up [T, I]"},
       {"out [T, I]"},
       {"interleaved", "limit", "alpha", "up_shift"},
       false,
       false,
       swiglu_shape,
       {kClamp, kScale, kSigmoid, kMul}},
      {kMoeRouter,
       "expert scores (softmax, sigmoid, sqrtsoftplus), (group-limited) top-k or a token-id hash table, "
       "weights",
       {"logits [T, E]", "correction_bias [E]?", "hash_table [V, k] i32?", "token_ids [T] i32?"},
       {"expert_ids [T, k] i32", "expert_weights [T, k]"},
       {"scoring", "method", "top_k", "n_group", "topk_group", "norm_topk_prob", "routed_scaling_factor"},
       false,
       false,
       router_shape,
       {}},
      {kMoeExperts,
       "dispatch, expert SwiGLU (or ungated relu2) MLPs, weighted combine",
       {"x [T, H]", "expert_ids [T, k]", "expert_weights [T, k]", "experts E x (gate, up, down) weight"},
       {"out [T, H]"},
       {"layout", "clamped", "limit", "alpha", "up_shift", "input_scaling", "activation"},
       true,
       false,
       experts_shape,
       {kGatherRows, kMatmul, kSwiglu, kClamp, kMul, kScatterAdd}},
      {kKvCompress,
       "compressed attention: every ratio tokens' kv pooled by softmax(gate + position bias), optionally "
       "overlapping the previous window",
       {"kv [W*m, C]", "gate [W*m, C]", "position_bias [m, C]", "prior_kv [m, d]?", "prior_gate [m, d]?"},
       {"out [W, d]"},
       {"ratio", "overlap", "bf16_steps"},
       false,
       false,
       kv_compress_shape,
       {}},
      {kHcWeights,
       "hyper-connection weights: sigmoid pre / post and a Sinkhorn-normalised comb from the streams' mixes",
       {"mixes [T, (2+n)*n]", "base [(2+n)*n]", "scale [3]"},
       {"pre [T, n]", "post [T, n]", "comb [T, n*n]"},
       {"n_streams", "sinkhorn_iters", "eps"},
       false,
       false,
       hc_weights_shape,
       {}},
      {kHcCollapse,
       "sum_j pre_j stream_j: the layer input from n residual streams",
       {"streams [T, n*H]", "pre [T, n]"},
       {"out [T, H]"},
       {"n_streams"},
       false,
       false,
       hc_collapse_shape,
       {kMul, kAdd}},
      {kHcExpand,
       "post_k x + sum_j comb_jk stream_j: the layer output and the streams into n new streams",
       {"x [T, H]", "streams [T, n*H]", "post [T, n]", "comb [T, n*n]"},
       {"out [T, n*H]"},
       {"n_streams", "bf16_steps"},
       false,
       false,
       hc_expand_shape,
       {kMul, kAdd, kRoundBf16}},
      {kAdd,
       "a + b (row/column broadcast)",
       {"a [R, C]", "b [R|1, C|1]"},
       {"out [R, C]"},
       {},
       false,
       false,
       binary_shape,
       {}},
      {kMul,
       "a * b (row/column broadcast)",
       {"a [R, C]", "b [R|1, C|1]"},
       {"out [R, C]"},
       {},
       false,
       false,
       binary_shape,
       {}},
      {kArgmax,
       "index of the row maximum",
       {"x [R, C]"},
       {"out [R] i32"},
       {},
       false,
       false,
       per_row_index,
       {}},
      {kSample,
       "temperature / top-k / top-p sampling, seeded",
       {"logits [R, V]"},
       {"out [R] i32"},
       {"temperature", "top_p", "top_k", "seed"},
       false,
       false,
       per_row_index,
       {}},
      {kClamp,
       "min(max(x, lo), hi)",
       {"x [R, C]"},
       {"y [R, C]"},
       {"lo", "hi"},
       false,
       true,
       same_as_first,
       {}},
      {kScale,
       "x * scale + shift",
       {"x [R, C]"},
       {"y [R, C]"},
       {"scale", "shift"},
       false,
       true,
       same_as_first,
       {}},
      {kRsqrt, "1 / sqrt(x + eps)", {"x [R, C]"}, {"y [R, C]"}, {"eps"}, false, true, same_as_first, {}},
      {kRowMean, "mean of each row", {"x [R, C]"}, {"y [R, 1]"}, {}, false, true, row_mean_shape, {}},
      {kKvWrite,
       "store rows in KV cache page slots, converted to the cache dtype",
       {"first [R, W1]", "second [R, W2]", "slots [R] i64"},
       {},
       {},
       false,
       false,
       kv_write_shape,
       {}},
      {kKvCopyBlocks,
       "copy on write: the first rows of KV blocks into fresh blocks, in order",
       {"src [n] i32", "dst [n] i32", "rows [n] i32"},
       {},
       {},
       false,
       false,
       kv_copy_shape,
       {}},
      {kRoundBf16,
       "round to the nearest bfloat16 (ties to even), kept as float32",
       {"x [R, C]"},
       {"y [R, C]"},
       {},
       false,
       false,
       same_as_first,
       {}},
      {kCopyColumns,
       "column groups of each row into another matrix (head gather / scatter)",
       {"x [R, Cx]"},
       {"y [R, y_cols]"},
       {"groups", "width", "x_col0", "x_stride", "y_col0", "y_stride", "y_cols"},
       false,
       false,
       copy_columns_shape,
       {}},
      {kGatherRows,
       "y[i] = x[idx[i]]",
       {"x [N, C]", "idx [n] i32"},
       {"y [n, C]"},
       {},
       false,
       true,
       gather_shape,
       {}},
      {kScatterAdd,
       "y[idx[i]] += w[i] x[i]",
       {"x [n, C]", "idx [n] i32", "y [N, C]"},
       {"y [N, C]"},
       {},
       false,
       true,
       scatter_shape,
       {}},
  };
}

}  // namespace

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> table = build_table();
  return table;
}

const OpSchema* find_op_schema(std::string_view name) {
  for (const auto& s : op_schemas()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<OpKey> decomposition_keys(std::string_view op, WeightFormat format) {
  std::vector<OpKey> out;
  const OpSchema* schema = find_op_schema(op);
  if (schema == nullptr) return out;
  for (std::string_view piece : schema->decomposition) {
    const OpSchema* p = find_op_schema(piece);
    out.push_back({piece, (p && p->reads_weights) ? format : WeightFormat::kF32});
  }
  return out;
}

}  // namespace day0
