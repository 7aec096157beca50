#include "day0/ops/kernel_checks.h"

#include <cmath>

#include <fmt/format.h>

#include "day0/core/error.h"

namespace day0 {

namespace {

template <typename T>
bool well_formed(const MatrixView<T>& m) {
  return m.rows >= 0 && m.cols >= 0 && m.stride >= m.cols &&
         (m.rows == 0 || m.cols == 0 || m.data != nullptr);
}

std::string shape(int64_t r, int64_t c) {
  return fmt::format("[{}, {}]", r, c);
}

#define D0_EXPECT_SHAPE(op, name, m, r, c)                                                                   \
  D0_CHECK_MSG(well_formed(m) && (m).rows == (r) && (m).cols == (c),                                         \
               fmt::format("{}: {} expected {} (stride >= cols), found {} stride {}", op, name, shape(r, c), \
                           shape((m).rows, (m).cols), (m).stride))

}  // namespace

void check_same_shape(ConstMatrix x, ConstMatrix y, const char* op) {
  D0_CHECK_MSG(well_formed(x), fmt::format("{}: malformed input view", op));
  D0_EXPECT_SHAPE(op, "output", y, x.rows, x.cols);
}

void check_args(const EmbeddingArgs& a) {
  D0_CHECK_MSG(a.table.valid(), "embedding: invalid table");
  D0_EXPECT_SHAPE("embedding", "out", a.out, static_cast<int64_t>(a.ids.size()), a.table.cols);
  for (int32_t id : a.ids) {
    D0_CHECK_MSG(id >= 0 && id < a.table.rows,
                 fmt::format("embedding: token id {} outside [0, {})", id, a.table.rows));
  }
}

void check_args(const MatmulArgs& a) {
  D0_CHECK_MSG(a.w.valid(), "matmul: invalid weight view");
  D0_EXPECT_SHAPE("matmul", "x", a.x, a.x.rows, a.w.cols);
  D0_EXPECT_SHAPE("matmul", "y", a.y, a.x.rows, a.w.rows);
}

void check_args(const GroupedMatmulArgs& a) {
  const int64_t g = a.groups;
  D0_CHECK_MSG(a.w.valid(), "grouped_matmul: invalid weight view");
  D0_CHECK_MSG(g > 0 && a.w.rows % g == 0,
               fmt::format("grouped_matmul: {} weight rows in {} groups", a.w.rows, g));
  D0_CHECK_MSG(
      a.w.format != WeightFormat::kFp8Block || (a.w.rows / g) % a.w.block_rows == 0,
      fmt::format("grouped_matmul: {} rows a group, FP8 blocks of {} rows", a.w.rows / g, a.w.block_rows));
  D0_EXPECT_SHAPE("grouped_matmul", "x", a.x, a.x.rows, g * a.w.cols);
  D0_EXPECT_SHAPE("grouped_matmul", "y", a.y, a.x.rows, a.w.rows);
}

void check_args(const RmsNormArgs& a) {
  check_same_shape(a.x, a.y, "rms_norm");
  D0_CHECK_MSG(a.weight.empty() || static_cast<int64_t>(a.weight.size()) == a.x.cols,
               "rms_norm: weight size");
}

void check_args(const LayerNormArgs& a) {
  check_same_shape(a.x, a.y, "layer_norm");
  D0_CHECK_MSG(a.weight.empty() || static_cast<int64_t>(a.weight.size()) == a.x.cols,
               "layer_norm: weight size");
  D0_CHECK_MSG(a.bias.empty() || static_cast<int64_t>(a.bias.size()) == a.x.cols, "layer_norm: bias size");
}

void check_args(const RopeArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.head_dim > 0, "rope: n_heads and head_dim must be positive");
  D0_CHECK_MSG(a.rotary_dim > 0 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.head_dim,
               fmt::format("rope: rotary_dim {} must be even and in (0, {}]", a.rotary_dim, a.head_dim));
  D0_CHECK_MSG(a.rotary_col0 >= 0 && a.rotary_col0 + a.rotary_dim <= a.head_dim,
               fmt::format("rope: dims [{}, {}) outside heads of {}", a.rotary_col0,
                           a.rotary_col0 + a.rotary_dim, a.head_dim));
  D0_EXPECT_SHAPE("rope", "x", a.x, static_cast<int64_t>(a.positions.size()), a.n_heads * a.head_dim);
  D0_CHECK_MSG(
      static_cast<int64_t>(a.inv_freq.size()) == a.rotary_dim / 2,
      fmt::format("rope: inv_freq has {} entries, expected {}", a.inv_freq.size(), a.rotary_dim / 2));
}

float attention_scale_of(const AttentionArgs& a) {
  return a.scale > 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
}

void check_args(const AttentionArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
               fmt::format("attention: n_heads {} must be a positive multiple of n_kv_heads {}", a.n_heads,
                           a.n_kv_heads));
  D0_CHECK_MSG(a.head_dim > 0, "attention: head_dim must be positive");
  const int64_t dv = v_head_dim_of(a);
  D0_EXPECT_SHAPE("attention", "q", a.q, a.q.rows, a.n_heads * a.head_dim);
  D0_EXPECT_SHAPE("attention", "k", a.k, a.k.rows, a.n_kv_heads * a.head_dim);
  D0_EXPECT_SHAPE("attention", "v", a.v, a.k.rows, a.n_kv_heads * dv);
  D0_EXPECT_SHAPE("attention", "out", a.out, a.q.rows, a.n_heads * dv);
  D0_CHECK_MSG(a.q_pos0 >= 0 && a.k_pos0 >= 0, "attention: negative position");
  D0_CHECK_MSG(a.mask == AttentionMask::kCausal || a.window > 0,
               "attention: sliding/chunked mask needs window > 0");
  D0_CHECK_MSG(a.sinks.empty() || static_cast<int64_t>(a.sinks.size()) == a.n_heads, "attention: sinks size");
  check_selection(a.selection, a.q.rows, a.n_heads, "attention");
}

void check_selection(const BlockSelection& s, int64_t rows, int64_t n_heads, const char* op) {
  if (s.empty()) return;
  D0_CHECK_MSG(
      s.block_size > 0 && s.groups > 0 && n_heads % s.groups == 0,
      fmt::format("{}: a block selection needs a positive block size and groups dividing the heads", op));
  D0_CHECK_MSG(s.blocks.rows == rows && s.blocks.cols > 0 && s.blocks.cols % s.groups == 0,
               fmt::format("{}: block selection [{}, {}] for {} rows of {} groups", op, s.blocks.rows,
                           s.blocks.cols, rows, s.groups));
}

void check_args(const MlaArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.d_nope > 0 && a.d_rope > 0 && a.d_v > 0 && a.kv_lora_rank > 0,
               "mla_attention: dimensions must be positive");
  D0_CHECK_MSG(a.scale > 0.0f, "mla_attention: scale must be set");
  D0_CHECK_MSG(
      a.w_kv_b.valid() && a.w_kv_b.rows == a.n_heads * (a.d_nope + a.d_v) && a.w_kv_b.cols == a.kv_lora_rank,
      fmt::format("mla_attention: w_kv_b expected {}, found {}",
                  shape(a.n_heads * (a.d_nope + a.d_v), a.kv_lora_rank),
                  shape(a.w_kv_b.rows, a.w_kv_b.cols)));
  D0_EXPECT_SHAPE("mla_attention", "q", a.q, a.q.rows, a.n_heads * (a.d_nope + a.d_rope));
  D0_EXPECT_SHAPE("mla_attention", "c_kv", a.c_kv, a.c_kv.rows, a.kv_lora_rank);
  D0_EXPECT_SHAPE("mla_attention", "k_pe", a.k_pe, a.c_kv.rows, a.d_rope);
  D0_EXPECT_SHAPE("mla_attention", "out", a.out, a.q.rows, a.n_heads * a.d_v);
  D0_CHECK_MSG(a.q_pos0 >= 0, "mla_attention: negative position");
  D0_CHECK_MSG(a.selected.rows == 0 || (a.selected.rows == a.q.rows && a.selected.cols > 0),
               "mla_attention: selected must have one row per query");
}

void check_args(const IndexerTopkArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.head_dim > 0 && a.key_col0 >= 0 && a.scale > 0.0f,
               "indexer_topk: dimensions and scale must be positive");
  D0_EXPECT_SHAPE("indexer_topk", "q", a.q, a.q.rows, a.n_heads * a.head_dim);
  D0_EXPECT_SHAPE("indexer_topk", "weights", a.weights, a.q.rows, a.n_heads);
  D0_CHECK_MSG(a.selected.rows == a.q.rows && a.selected.cols > 0, "indexer_topk: selected shape");
  D0_CHECK_MSG(a.key_ratio >= 1, fmt::format("indexer_topk: key_ratio {}", a.key_ratio));
  D0_CHECK_MSG(a.ambiguous.empty() || static_cast<int64_t>(a.ambiguous.size()) == a.q.rows,
               fmt::format("indexer_topk: {} ambiguity flags for {} rows", a.ambiguous.size(), a.q.rows));
  for (const PagedSequence& s : a.seqs) {
    D0_CHECK_MSG(s.kv.second_width >= a.key_col0 + a.head_dim,
                 "indexer_topk: cache rows narrower than the key");
    D0_CHECK_MSG(s.q_row0 >= 0 && s.q_rows >= 0 && s.q_row0 + s.q_rows <= a.q.rows,
                 "indexer_topk: query rows");
  }
}

void check_args(const BlockIndexerTopkArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.head_dim > 0 && a.key_col0 >= 0 && a.block_size > 0 && a.local_blocks >= 0,
               "block_indexer_topk: dimensions must be positive");
  D0_EXPECT_SHAPE("block_indexer_topk", "q", a.q, a.q.rows, a.n_heads * a.head_dim);
  D0_CHECK_MSG(a.selected.rows == a.q.rows && a.selected.cols > 0 && a.selected.cols % a.n_heads == 0,
               "block_indexer_topk: selected must be [T, n_heads * k]");
  D0_CHECK_MSG(a.local_blocks <= a.selected.cols / a.n_heads,
               "block_indexer_topk: more local blocks than selected blocks");
  for (const PagedSequence& s : a.seqs) {
    D0_CHECK_MSG(s.kv.second_width >= a.key_col0 + a.head_dim,
                 "block_indexer_topk: cache rows narrower than the key");
    D0_CHECK_MSG(s.q_row0 >= 0 && s.q_rows >= 0 && s.q_row0 + s.q_rows <= a.q.rows,
                 "block_indexer_topk: query rows");
  }
}

void check_args(const CausalConv1dArgs& a) {
  D0_CHECK_MSG(a.kernel >= 1, "causal_conv1d: kernel must be at least 1");
  D0_CHECK_MSG(well_formed(a.x), "causal_conv1d: malformed input view");
  D0_EXPECT_SHAPE("causal_conv1d", "y", a.y, a.x.rows, a.x.cols);
  D0_CHECK_MSG(static_cast<int64_t>(a.weight.size()) == a.x.cols * a.kernel,
               fmt::format("causal_conv1d: weight has {} values, expected {} channels x {} taps",
                           a.weight.size(), a.x.cols, a.kernel));
  D0_CHECK_MSG(a.bias.empty() || static_cast<int64_t>(a.bias.size()) == a.x.cols,
               "causal_conv1d: bias needs one value per channel");
  for (const ConvSequence& s : a.seqs) {
    D0_CHECK_MSG(s.row0 >= 0 && s.rows >= 0 && s.row0 + s.rows <= a.x.rows, "causal_conv1d: sequence rows");
    D0_CHECK_MSG(s.rows == 0 || a.kernel == 1 || s.window != nullptr,
                 "causal_conv1d: a sequence without a window");
  }
}

void check_args(const GatedDeltaRuleArgs& a) {
  const int64_t nk = a.n_key_heads, nv = a.n_value_heads, dk = a.key_head_dim, dv = a.value_head_dim;
  D0_CHECK_MSG(
      nk > 0 && nv > 0 && dk > 0 && dv > 0 && nv % nk == 0,
      "gated_delta_rule: head counts and sizes must be positive, n_value_heads a multiple of n_key_heads");
  const int64_t t = a.q.rows;
  D0_EXPECT_SHAPE("gated_delta_rule", "q", a.q, t, nk * dk);
  D0_EXPECT_SHAPE("gated_delta_rule", "k", a.k, t, nk * dk);
  D0_EXPECT_SHAPE("gated_delta_rule", "v", a.v, t, nv * dv);
  D0_EXPECT_SHAPE("gated_delta_rule", "a", a.a, t, nv);
  D0_EXPECT_SHAPE("gated_delta_rule", "beta", a.beta, t, nv);
  D0_EXPECT_SHAPE("gated_delta_rule", "out", a.out, t, nv * dv);
  D0_CHECK_MSG(static_cast<int64_t>(a.a_log.size()) == nv && static_cast<int64_t>(a.dt_bias.size()) == nv,
               "gated_delta_rule: a_log and dt_bias need one value per value head");
  for (const DeltaSequence& s : a.seqs) {
    D0_CHECK_MSG(s.row0 >= 0 && s.rows >= 0 && s.row0 + s.rows <= t, "gated_delta_rule: sequence rows");
    D0_CHECK_MSG(s.rows == 0 || s.state != nullptr, "gated_delta_rule: a sequence without a state");
  }
}

void check_args(const SsmScanArgs& a) {
  const int64_t nh = a.n_heads, p = a.head_dim, g = a.n_groups, n = a.state_size;
  D0_CHECK_MSG(nh > 0 && p > 0 && g > 0 && n > 0 && nh % g == 0,
               "ssm_scan: head counts and sizes must be positive, n_heads a multiple of n_groups");
  const int64_t t = a.x.rows;
  D0_EXPECT_SHAPE("ssm_scan", "x", a.x, t, nh * p);
  D0_EXPECT_SHAPE("ssm_scan", "dt", a.dt, t, nh);
  D0_EXPECT_SHAPE("ssm_scan", "b", a.b, t, g * n);
  D0_EXPECT_SHAPE("ssm_scan", "c", a.c, t, g * n);
  D0_EXPECT_SHAPE("ssm_scan", "y", a.y, t, nh * p);
  D0_CHECK_MSG(static_cast<int64_t>(a.a_log.size()) == nh, "ssm_scan: a_log needs one value per head");
  D0_CHECK_MSG(a.d.empty() || static_cast<int64_t>(a.d.size()) == nh, "ssm_scan: d needs one value per head");
  for (const DeltaSequence& s : a.seqs) {
    D0_CHECK_MSG(s.row0 >= 0 && s.rows >= 0 && s.row0 + s.rows <= t, "ssm_scan: sequence rows");
    D0_CHECK_MSG(s.rows == 0 || s.state != nullptr, "ssm_scan: a sequence without a state");
  }
}

void check_args(const GatedRmsNormArgs& a) {
  D0_CHECK_MSG(well_formed(a.x), "gated_rms_norm: malformed input view");
  D0_EXPECT_SHAPE("gated_rms_norm", "z", a.z, a.x.rows, a.x.cols);
  D0_EXPECT_SHAPE("gated_rms_norm", "y", a.y, a.x.rows, a.x.cols);
  D0_CHECK_MSG(static_cast<int64_t>(a.weight.size()) == a.x.cols, "gated_rms_norm: weight width");
}

void check_args(const SwigluArgs& a) {
  if (a.interleaved) {
    D0_EXPECT_SHAPE("swiglu", "gate_up", a.gate, a.out.rows, 2 * a.out.cols);
  } else {
    D0_EXPECT_SHAPE("swiglu", "gate", a.gate, a.out.rows, a.out.cols);
    D0_EXPECT_SHAPE("swiglu", "up", a.up, a.out.rows, a.out.cols);
  }
  D0_CHECK_MSG(well_formed(a.out), "swiglu: malformed output");
}

void check_args(const BinaryArgs& a) {
  D0_CHECK_MSG(well_formed(a.a) && well_formed(a.b), "binary op: malformed input");
  D0_EXPECT_SHAPE("binary op", "out", a.out, a.a.rows, a.a.cols);
  const bool same = a.b.rows == a.a.rows && a.b.cols == a.a.cols;
  const bool row_bcast = a.b.rows == 1 && a.b.cols == a.a.cols;
  const bool col_bcast = a.b.rows == a.a.rows && a.b.cols == 1;
  const bool scalar = a.b.rows == 1 && a.b.cols == 1;
  D0_CHECK_MSG(same || row_bcast || col_bcast || scalar,
               fmt::format("binary op: b {} does not broadcast to {}", shape(a.b.rows, a.b.cols),
                           shape(a.a.rows, a.a.cols)));
}

void check_args(const MoeRouterArgs& a) {
  const int64_t e = a.logits.cols;
  D0_CHECK_MSG(well_formed(a.logits), "moe_router: malformed logits");
  D0_CHECK_MSG(a.top_k > 0 && a.top_k <= e, fmt::format("moe_router: top_k {} outside [1, {}]", a.top_k, e));
  D0_EXPECT_SHAPE("moe_router", "expert_ids", a.expert_ids, a.logits.rows, a.top_k);
  D0_EXPECT_SHAPE("moe_router", "expert_weights", a.expert_weights, a.logits.rows, a.top_k);
  D0_CHECK_MSG(a.expert_scale.empty() || static_cast<int64_t>(a.expert_scale.size()) == e,
               fmt::format("moe_router: expert_scale has {} entries, expected {} (one an expert)",
                           a.expert_scale.size(), e));
  if (a.method == TopkMethod::kGroupLimitedGreedy || a.method == TopkMethod::kNoauxTc) {
    D0_CHECK_MSG(a.n_group > 0 && e % a.n_group == 0 && a.topk_group > 0 && a.topk_group <= a.n_group,
                 fmt::format("moe_router: {} experts in {} groups, keep {}", e, a.n_group, a.topk_group));
    D0_CHECK_MSG(a.top_k <= a.topk_group * (e / a.n_group), "moe_router: top_k larger than the kept groups");
  }
  if (a.method == TopkMethod::kNoauxTc && !a.hashed()) {
    D0_CHECK_MSG(static_cast<int64_t>(a.correction_bias.size()) == e, "moe_router: correction_bias size");
  }
  if (a.hashed()) {
    D0_CHECK_MSG(a.method != TopkMethod::kLogitsThenSoftmax && a.method != TopkMethod::kLogitsThenSigmoid,
                 "moe_router: hash routing weighs its picks by the scores, not the logits");
    D0_EXPECT_SHAPE("moe_router", "hash_table", a.hash_table, a.hash_table.rows, a.top_k);
    D0_CHECK_MSG(static_cast<int64_t>(a.token_ids.size()) == a.logits.rows,
                 fmt::format("moe_router: {} token ids for {} tokens", a.token_ids.size(), a.logits.rows));
    for (int32_t id : a.token_ids) {  // only the rows this call reads
      D0_CHECK_MSG(
          id >= 0 && id < a.hash_table.rows,
          fmt::format("moe_router: token id {} outside the hash table's [0, {})", id, a.hash_table.rows));
      for (int64_t j = 0; j < a.top_k; ++j) {
        const int32_t expert = a.hash_table.row(id)[j];
        D0_CHECK_MSG(expert >= 0 && expert < e,
                     fmt::format("moe_router: hash table row {} names expert {} of {}", id, expert, e));
      }
    }
  }
}

void check_args(const MoeExpertsArgs& a) {
  const int64_t h = a.x.cols;
  const int64_t k = a.expert_ids.cols;
  D0_EXPECT_SHAPE("moe_experts", "x", a.x, a.x.rows, h);
  D0_EXPECT_SHAPE("moe_experts", "expert_ids", a.expert_ids, a.x.rows, k);
  D0_EXPECT_SHAPE("moe_experts", "expert_weights", a.expert_weights, a.x.rows, k);
  D0_EXPECT_SHAPE("moe_experts", "out", a.out, a.x.rows, h);
  D0_CHECK_MSG(a.n_zero_experts >= 0 && !(a.n_zero_experts > 0 && a.input_scaling),
               "moe_experts: zero experts need output weighting");
  const int64_t routed = a.routed_experts();
  const auto held = static_cast<int64_t>(a.experts.size());
  if (a.expert_slot.empty()) {
    D0_CHECK_MSG(held == routed,
                 fmt::format("moe_experts: {} experts without a slot map, the model's {}", held, routed));
  } else {
    D0_CHECK_MSG(
        static_cast<int64_t>(a.expert_slot.size()) == routed,
        fmt::format("moe_experts: a slot map of {} experts, the model's {}", a.expert_slot.size(), routed));
    for (int32_t slot : a.expert_slot)
      D0_CHECK_MSG(slot >= -1 && slot < held, fmt::format("moe_experts: slot {} of {} held", slot, held));
  }
  const int64_t n_experts = routed + a.n_zero_experts;
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = a.expert_ids.row(t)[j];
      D0_CHECK_MSG(e == MoeExpertsArgs::kPickedElsewhere || (e >= 0 && e < n_experts),
                   fmt::format("moe_experts: expert id {} outside [0, {})", e, n_experts));
    }
  }
  for (const auto& ew : a.experts) {
    const int64_t inter = ew.down.cols;
    D0_CHECK_MSG(ew.down.valid() && ew.down.rows == h, "moe_experts: down weight must be [H, I]");
    D0_CHECK_MSG(static_cast<int>(a.relu2) + static_cast<int>(a.clamped) + static_cast<int>(a.gelu_tanh) <= 1,
                 "moe_experts: relu2, clamped and gelu_tanh experts exclude each other");
    D0_CHECK_MSG(
        !a.gelu_tanh || a.layout != GateUpLayout::kInterleaved,
        "moe_experts: gelu_tanh experts take separate or concatenated gate / up rows, found interleaved");
    if (a.relu2) {
      D0_CHECK_MSG(a.layout == GateUpLayout::kSeparate && !a.clamped && ew.up.valid() &&
                       ew.up.rows == inter && ew.up.cols == h,
                   "moe_experts: relu2 experts need a separate up weight [I, H]");
    } else if (a.layout == GateUpLayout::kSeparate) {
      D0_CHECK_MSG(ew.gate.valid() && ew.up.valid() && ew.gate.rows == inter && ew.up.rows == inter &&
                       ew.gate.cols == h && ew.up.cols == h,
                   "moe_experts: gate/up weights must be [I, H]");
    } else {
      D0_CHECK_MSG(ew.gate.valid() && ew.gate.rows == 2 * inter && ew.gate.cols == h,
                   "moe_experts: fused gate_up weight must be [2I, H]");
    }
  }
}

void check_args(const KvCompressArgs& a) {
  const int64_t m = a.ratio, c = a.kv.cols, d = a.out.cols;
  D0_CHECK_MSG(m > 0 && a.kv.rows % m == 0,
               fmt::format("kv_compress: {} rows in windows of {}", a.kv.rows, m));
  D0_CHECK_MSG(c == (a.overlap ? 2 * d : d), fmt::format("kv_compress: {} kv columns for entries of {}{}", c,
                                                         d, a.overlap ? " (overlap)" : ""));
  D0_EXPECT_SHAPE("kv_compress", "kv", a.kv, a.kv.rows, c);
  D0_EXPECT_SHAPE("kv_compress", "gate", a.gate, a.kv.rows, c);
  D0_EXPECT_SHAPE("kv_compress", "position_bias", a.position_bias, m, c);
  D0_EXPECT_SHAPE("kv_compress", "out", a.out, a.kv.rows / m, d);
  D0_CHECK_MSG((a.prior_kv.rows == 0) == (a.prior_gate.rows == 0) && (a.prior_kv.rows == 0 || a.overlap),
               "kv_compress: prior kv and gate come together, with overlap");
  if (a.prior_kv.rows > 0) {
    D0_EXPECT_SHAPE("kv_compress", "prior_kv", a.prior_kv, m, d);
    D0_EXPECT_SHAPE("kv_compress", "prior_gate", a.prior_gate, m, d);
  }
}

void check_args(const HcWeightsArgs& a) {
  const int64_t n = a.n_streams, t = a.mixes.rows;
  D0_CHECK_MSG(n > 0 && a.sinkhorn_iters >= 1,
               fmt::format("hc_weights: {} streams, {} Sinkhorn iterations", n, a.sinkhorn_iters));
  D0_CHECK_MSG(well_formed(a.mixes) && (a.mixes.cols == n || a.mixes.cols == (2 + n) * n),
               fmt::format("hc_weights: mixes {} for {} streams, expected {} or {} columns",
                           shape(t, a.mixes.cols), n, n, (2 + n) * n));
  D0_CHECK_MSG(static_cast<int64_t>(a.base.size()) == a.mixes.cols,
               fmt::format("hc_weights: base has {} entries, mixes {} columns", a.base.size(), a.mixes.cols));
  D0_CHECK_MSG(
      a.scale.size() == (a.head() ? 1u : 3u),
      fmt::format("hc_weights: scale has {} entries, expected {}", a.scale.size(), a.head() ? 1 : 3));
  D0_EXPECT_SHAPE("hc_weights", "pre", a.pre, t, n);
  if (!a.head()) {
    D0_EXPECT_SHAPE("hc_weights", "post", a.post, t, n);
    D0_EXPECT_SHAPE("hc_weights", "comb", a.comb, t, n * n);
  }
}

void check_args(const HcCollapseArgs& a) {
  const int64_t n = a.n_streams, t = a.streams.rows, h = a.out.cols;
  D0_CHECK_MSG(n > 0, "hc_collapse: no streams");
  D0_EXPECT_SHAPE("hc_collapse", "streams", a.streams, t, n * h);
  D0_EXPECT_SHAPE("hc_collapse", "pre", a.pre, t, n);
  D0_EXPECT_SHAPE("hc_collapse", "out", a.out, t, h);
}

void check_args(const HcExpandArgs& a) {
  const int64_t n = a.n_streams, t = a.x.rows, h = a.x.cols;
  D0_CHECK_MSG(n > 0, "hc_expand: no streams");
  D0_EXPECT_SHAPE("hc_expand", "x", a.x, t, h);
  D0_EXPECT_SHAPE("hc_expand", "streams", a.streams, t, n * h);
  D0_EXPECT_SHAPE("hc_expand", "post", a.post, t, n);
  D0_EXPECT_SHAPE("hc_expand", "comb", a.comb, t, n * n);
  D0_EXPECT_SHAPE("hc_expand", "out", a.out, t, n * h);
}

void check_args(const ArgmaxArgs& a) {
  D0_CHECK_MSG(well_formed(a.x) && a.x.cols > 0, "argmax: empty rows");
  D0_CHECK_MSG(static_cast<int64_t>(a.out.size()) == a.x.rows, "argmax: out size");
}

void check_args(const SampleArgs& a) {
  D0_CHECK_MSG(well_formed(a.logits) && a.logits.cols > 0, "sample: empty rows");
  D0_CHECK_MSG(static_cast<int64_t>(a.out.size()) == a.logits.rows, "sample: out size");
  D0_CHECK_MSG(a.top_p > 0.0f && a.top_p <= 1.0f, "sample: top_p outside (0, 1]");
  D0_CHECK_MSG(a.top_k >= 0, "sample: negative top_k");
}

void check_args(const GatherRowsArgs& a) {
  D0_EXPECT_SHAPE("gather_rows", "y", a.y, static_cast<int64_t>(a.idx.size()), a.x.cols);
  for (int32_t i : a.idx) D0_CHECK_MSG(i >= 0 && i < a.x.rows, "gather_rows: index out of range");
}

void check_args(const CopyColumnsArgs& a) {
  D0_CHECK_MSG(a.x.rows == a.y.rows, "copy_columns: x and y row counts differ");
  D0_CHECK_MSG(
      a.groups >= 0 && a.width >= 0 && a.x_col0 >= 0 && a.y_col0 >= 0 && a.x_stride >= 0 && a.y_stride >= 0,
      "copy_columns: negative extent");
  if (a.groups == 0 || a.width == 0 || a.x.rows == 0) return;
  D0_CHECK_MSG(a.groups == 1 || (a.x_stride >= a.width && a.y_stride >= a.width),
               "copy_columns: groups overlap (stride below width)");
  D0_CHECK_MSG(a.x_col0 + (a.groups - 1) * a.x_stride + a.width <= a.x.cols,
               "copy_columns: x columns out of range");
  D0_CHECK_MSG(a.y_col0 + (a.groups - 1) * a.y_stride + a.width <= a.y.cols,
               "copy_columns: y columns out of range");
  const float* x_end = a.x.row(a.x.rows - 1) + a.x.cols;
  const float* y_end = a.y.row(a.y.rows - 1) + a.y.cols;
  D0_CHECK_MSG(x_end <= a.y.row(0) || y_end <= a.x.row(0), "copy_columns: x and y overlap");
}

void check_args(const ScatterAddArgs& a) {
  D0_EXPECT_SHAPE("scatter_add", "x", a.x, static_cast<int64_t>(a.idx.size()), a.y.cols);
  D0_CHECK_MSG(a.weight.empty() || a.weight.size() == a.idx.size(), "scatter_add: weight size");
  for (int32_t i : a.idx) D0_CHECK_MSG(i >= 0 && i < a.y.rows, "scatter_add: index out of range");
}

namespace {

void check_pool(const KvBlockTable& p, const char* op) {
  D0_CHECK_MSG(p.space == MemorySpace::kHost, fmt::format("{}: the KV pool is not in host memory", op));
  D0_CHECK_MSG(p.block_tokens > 0 && p.n_blocks >= 0 && p.first_width >= 0 && p.second_width >= 0,
               fmt::format("{}: malformed KV block table", op));
  D0_CHECK_MSG(p.n_blocks == 0 || (p.first_blocks != nullptr && p.second_blocks != nullptr),
               fmt::format("{}: KV block table without blocks", op));
}

}  // namespace

void check_args(const KvWriteArgs& a) {
  check_pool(a.pool, "kv_write");
  D0_CHECK_MSG(a.first.on_host() && a.second.on_host(), "kv_write: rows not in host memory");
  const auto rows = static_cast<int64_t>(a.slots.size());
  D0_EXPECT_SHAPE("kv_write", "first", a.first, rows, a.pool.first_width);
  D0_EXPECT_SHAPE("kv_write", "second", a.second, rows, a.pool.second_width);
  for (int64_t s : a.slots)
    D0_CHECK_MSG(s >= 0 && s < a.pool.n_blocks * a.pool.block_tokens, "kv_write: slot outside the pool");
}

void check_args(const KvCopyBlocksArgs& a) {
  check_pool(a.pool, "kv_copy_blocks");
  D0_CHECK_MSG(a.src.size() == a.dst.size() && a.src.size() == a.rows.size(), "kv_copy_blocks: list sizes");
  for (size_t i = 0; i < a.src.size(); ++i) {
    D0_CHECK_MSG(a.src[i] >= 0 && a.src[i] < a.pool.n_blocks && a.dst[i] >= 0 && a.dst[i] < a.pool.n_blocks,
                 "kv_copy_blocks: block outside the pool");
    D0_CHECK_MSG(a.src[i] != a.dst[i], "kv_copy_blocks: a block copied onto itself");
    D0_CHECK_MSG(a.rows[i] >= 0 && a.rows[i] <= a.pool.block_tokens, "kv_copy_blocks: row count");
  }
}

}  // namespace day0
