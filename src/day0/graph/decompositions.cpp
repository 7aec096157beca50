#include "day0/graph/decompositions.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/key_selection.h"
#include "day0/ops/op_schema.h"
#include "day0/ops/paged_gather.h"
#include "day0/ops/weight_row_block.h"

namespace day0 {

namespace {

// A zero-initialised float32 matrix owned by the decomposition.
struct Buffer {
  std::vector<float> storage;
  Matrix m;
  Buffer(int64_t rows, int64_t cols)
      : storage(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)), 0.0f),
        m(storage.data(), rows, cols) {}
};

// gate and up of one row of an interleaved [T, 2I] gate_up as [I, 1] views with stride 2.
ConstMatrix interleaved_part(ConstMatrix gate_up, int64_t row, int64_t part) {
  return {gate_up.row(row) + part, gate_up.cols / 2, 1, 2};
}

// Runs `body(gate, up, out)` on whole matrices, or row by row for the interleaved layout.
template <typename F>
void for_gate_up(const SwigluArgs& a, F body) {
  if (!a.interleaved) {
    body(a.gate, a.up, a.out);
    return;
  }
  for (int64_t t = 0; t < a.out.rows; ++t) {
    body(interleaved_part(a.gate, t, 0), interleaved_part(a.gate, t, 1),
         Matrix{a.out.row(t), a.out.cols, 1, 1});
  }
}

}  // namespace

bool has_decomposition(std::string_view op) {
  const OpSchema* s = find_op_schema(op);
  return s != nullptr && !s->decomposition.empty();
}

void decompose_grouped_matmul(Backend& be, const GroupedMatmulArgs& a) {
  check_args(a);
  const int64_t k = a.w.cols, n = a.w.rows / a.groups;
  for (int64_t g = 0; g < a.groups; ++g) {
    be.matmul({.x = a.x.col_slice(g * k, k),
               .w = weight_row_block(a.w, g * n, n),
               .y = a.y.col_slice(g * n, n),
               .exact = a.exact,
               .row_invariant = a.row_invariant});
  }
}

void decompose_gated_rms_norm(Backend& be, const GatedRmsNormArgs& a) {
  check_args(a);
  Buffer gate(a.z.rows, a.z.cols);  // [R, n] silu(z)
  be.silu({.x = a.z, .y = gate.m});
  be.rms_norm({a.x, a.weight, a.eps, a.y});
  be.mul({a.y, gate.m, a.y});
}

void decompose_rms_norm(Backend& be, const RmsNormArgs& a) {
  check_args(a);
  Buffer sq(a.x.rows, a.x.cols);
  Buffer inv(a.x.rows, 1);
  be.mul({a.x, a.x, sq.m});
  be.row_mean({.x = sq.m, .y = inv.m});
  be.rsqrt({.x = inv.m, .y = inv.m, .eps = a.eps});
  be.mul({a.x, inv.m, a.y});
  if (!a.weight.empty()) {
    be.mul({a.y, ConstMatrix{a.weight.data(), 1, a.x.cols}, a.y});
  }
}

void decompose_layer_norm(Backend& be, const LayerNormArgs& a) {
  check_args(a);
  Buffer mean(a.x.rows, 1);
  Buffer centred(a.x.rows, a.x.cols);
  Buffer sq(a.x.rows, a.x.cols);
  be.row_mean({.x = a.x, .y = mean.m});
  be.scale({.x = mean.m, .y = mean.m, .scale = -1.0f});
  be.add({a.x, mean.m, centred.m});
  be.mul({centred.m, centred.m, sq.m});
  be.row_mean({.x = sq.m, .y = mean.m});
  be.rsqrt({.x = mean.m, .y = mean.m, .eps = a.eps});
  be.mul({centred.m, mean.m, a.y});
  if (!a.weight.empty()) be.mul({a.y, ConstMatrix{a.weight.data(), 1, a.x.cols}, a.y});
  if (!a.bias.empty()) be.add({a.y, ConstMatrix{a.bias.data(), 1, a.x.cols}, a.y});
}

void decompose_swiglu(Backend& be, const SwigluArgs& a) {
  check_args(a);
  for_gate_up(a, [&](ConstMatrix gate, ConstMatrix up, Matrix out) {
    Buffer act(gate.rows, gate.cols);
    be.silu({gate, act.m});
    be.mul({act.m, up, out});
  });
}

void decompose_swiglu_clamped(Backend& be, const SwigluArgs& a) {
  check_args(a);
  for_gate_up(a, [&](ConstMatrix gate, ConstMatrix up, Matrix out) {
    Buffer g(gate.rows, gate.cols);
    Buffer s(gate.rows, gate.cols);
    be.clamp({.x = gate, .y = g.m, .hi = a.limit});
    be.scale({.x = g.m, .y = s.m, .scale = a.alpha});
    be.sigmoid({s.m, s.m});
    be.mul({g.m, s.m, g.m});  // glu = g * sigmoid(alpha g)
    be.clamp({.x = up, .y = s.m, .lo = -a.limit, .hi = a.limit});
    be.scale({.x = s.m, .y = s.m, .shift = a.up_shift});
    be.mul({g.m, s.m, out});
  });
}

void decompose_hc_collapse(Backend& be, const HcCollapseArgs& a) {
  check_args(a);
  const int64_t h = a.out.cols;
  Buffer term(a.out.rows, h);  // [T, H] one stream times its weight
  for (int64_t j = 0; j < a.n_streams; ++j) {
    be.mul({a.streams.col_slice(j * h, h), a.pre.col_slice(j, 1), j == 0 ? a.out : term.m});
    if (j > 0) be.add({a.out, term.m, a.out});
  }
}

void decompose_hc_expand(Backend& be, const HcExpandArgs& a) {
  check_args(a);
  const int64_t n = a.n_streams, h = a.x.cols, t = a.x.rows;
  ConstMatrix post = a.post, comb = a.comb;
  Buffer post_bf16(t, n), comb_bf16(t, n * n);  // [T, n], [T, n * n] rounded (bf16_steps)
  const auto step = [&](Matrix m) {
    if (a.bf16_steps) be.round_bf16({.x = m, .y = m});
  };
  if (a.bf16_steps) {
    be.round_bf16({.x = a.post, .y = post_bf16.m});
    be.round_bf16({.x = a.comb, .y = comb_bf16.m});
    post = post_bf16.m;
    comb = comb_bf16.m;
  }
  Buffer mixed(t, h), term(t, h);  // [T, H] sum_j comb[j, k] stream j, and one of its terms
  for (int64_t k = 0; k < n; ++k) {
    const Matrix out = a.out.col_slice(k * h, h);
    be.mul({a.x, post.col_slice(k, 1), out});
    step(out);
    for (int64_t j = 0; j < n; ++j) {
      be.mul({a.streams.col_slice(j * h, h), comb.col_slice(j * n + k, 1), j == 0 ? mixed.m : term.m});
      if (j > 0) be.add({mixed.m, term.m, mixed.m});
    }
    step(mixed.m);
    be.add({out, mixed.m, out});
    step(out);
  }
}

void decompose_mla_attention(Backend& be, const MlaArgs& a) {
  check_args(a);
  const int64_t s = a.c_kv.rows;
  const int64_t per_head = a.d_nope + a.d_v;
  const int64_t dqk = a.d_nope + a.d_rope;
  // Expanded per-head keys and values of every cached token (the naive form, as HF caches them).
  Buffer kv(s, a.n_heads * per_head);
  be.matmul({.x = a.c_kv, .w = a.w_kv_b, .y = kv.m});
  Buffer k(s, a.n_heads * dqk);
  Buffer v(s, a.n_heads * a.d_v);
  for (int64_t h = 0; h < a.n_heads; ++h) {
    be.scale({.x = kv.m.col_slice(h * per_head, a.d_nope), .y = k.m.col_slice(h * dqk, a.d_nope)});
    be.scale({.x = a.k_pe, .y = k.m.col_slice(h * dqk + a.d_nope, a.d_rope)});
    be.scale({.x = kv.m.col_slice(h * per_head + a.d_nope, a.d_v), .y = v.m.col_slice(h * a.d_v, a.d_v)});
  }
  if (a.selected.rows > 0) {
    // Sparse attention: each query over its own selected keys (gathered), all visible to it.
    std::vector<char> keep;
    std::vector<int32_t> rows;
    for (int64_t t = 0; t < a.q.rows; ++t) {
      selected_keys(a.selected, t, std::min<int64_t>(s, a.q_pos0 + t + 1), keep);
      rows.clear();
      for (size_t j = 0; j < keep.size(); ++j)
        if (keep[j]) rows.push_back(static_cast<int32_t>(j));
      const auto n = static_cast<int64_t>(rows.size());
      Buffer ks(n, a.n_heads * dqk), vs(n, a.n_heads * a.d_v);
      be.gather_rows({k.m, rows, ks.m});
      be.gather_rows({v.m, rows, vs.m});
      be.attention({.q = a.q.row_slice(t, 1),
                    .k = ks.m,
                    .v = vs.m,
                    .out = a.out.row_slice(t, 1),
                    .n_heads = a.n_heads,
                    .n_kv_heads = a.n_heads,
                    .head_dim = dqk,
                    .v_head_dim = a.d_v,
                    .q_pos0 = std::max<int64_t>(n - 1, 0),
                    .scale = a.scale});
    }
    return;
  }
  be.attention({.q = a.q,
                .k = k.m,
                .v = v.m,
                .out = a.out,
                .n_heads = a.n_heads,
                .n_kv_heads = a.n_heads,
                .head_dim = dqk,
                .v_head_dim = a.d_v,
                .q_pos0 = a.q_pos0,
                .scale = a.scale});
}

void decompose_paged_attention(Backend& be, const PagedAttentionArgs& a) {
  for_each_gathered_sequence(a, [&](const AttentionArgs& one) { be.attention(one); });
}

void decompose_paged_mla_attention(Backend& be, const PagedMlaArgs& a) {
  for_each_gathered_sequence(a, [&](const MlaArgs& one) { be.mla_attention(one); });
}

void decompose_moe_experts(Backend& be, const MoeExpertsArgs& a) {
  check_args(a);
  const int64_t h = a.x.cols;
  const int64_t k = a.expert_ids.cols;
  if (!a.accumulate) {
    for (int64_t t = 0; t < a.out.rows; ++t) std::fill(a.out.row(t), a.out.row(t) + h, 0.0f);
  }
  // Dispatch: the tokens (and their weights) routed to each expert.
  // Zero-computation experts (ids past the real ones) share one list: their weighted input rows.
  std::vector<std::vector<int32_t>> tokens(a.experts.size() + 1);
  std::vector<std::vector<float>> weights(a.experts.size() + 1);
  // Picks another rank computes (expert parallelism: not held here, or another copy's) are skipped.
  const int64_t routed = a.routed_experts();
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t id = a.expert_ids.row(t)[j];
      const int64_t local = a.slot_of(id);
      if (id < routed && local < 0) continue;
      const auto e = id >= routed ? a.experts.size() : static_cast<size_t>(local);
      tokens[e].push_back(static_cast<int32_t>(t));
      weights[e].push_back(a.expert_weights.row(t)[j]);
    }
  }
  if (!tokens.back().empty()) {
    const auto n = static_cast<int64_t>(tokens.back().size());
    Buffer xe(n, h);
    be.gather_rows({a.x, tokens.back(), xe.m});
    be.scatter_add({xe.m, tokens.back(), weights.back(), a.out});
  }
  // Experts in id order, each token's in the order a one-token call adds them; under row invariance the
  // matmuls keep each row's one-token bits, so a token's output does not depend on the others.
  const auto expert_matmul = [&](ConstMatrix x, const WeightView& w, const float* bias, Matrix y) {
    be.matmul({.x = x, .w = w, .bias = bias, .y = y, .exact = a.exact, .row_invariant = a.row_invariant});
  };
  for (size_t e = 0; e < a.experts.size(); ++e) {
    const auto n = static_cast<int64_t>(tokens[e].size());
    if (n == 0) continue;  // an expert nobody chose costs nothing
    const ExpertWeights& ew = a.experts[e];
    const int64_t inter = ew.down.cols;
    Buffer xe(n, h);
    be.gather_rows({a.x, tokens[e], xe.m});
    if (a.input_scaling) be.mul({xe.m, ConstMatrix{weights[e].data(), n, 1}, xe.m});
    Buffer act(n, inter);
    SwigluArgs glu{.out = act.m, .limit = a.limit, .alpha = a.alpha, .up_shift = a.up_shift};
    Buffer gate_up(n, 2 * inter);
    if (a.relu2) {  // ungated: relu(up x)^2 as clamp and mul
      expert_matmul(xe.m, ew.up, ew.up_bias, act.m);
      be.clamp({.x = act.m, .y = act.m, .lo = 0.0f});
      be.mul({act.m, act.m, act.m});
    } else if (a.layout == GateUpLayout::kSeparate) {
      expert_matmul(xe.m, ew.gate, ew.gate_bias, gate_up.m.col_slice(0, inter));
      expert_matmul(xe.m, ew.up, ew.up_bias, gate_up.m.col_slice(inter, inter));
    } else {
      expert_matmul(xe.m, ew.gate, ew.gate_bias, gate_up.m);
    }
    if (a.layout == GateUpLayout::kInterleaved) {
      glu.gate = gate_up.m;
      glu.interleaved = true;
    } else {
      glu.gate = gate_up.m.col_slice(0, inter);
      glu.up = gate_up.m.col_slice(inter, inter);
    }
    if (a.relu2) {
      // act holds relu(up x)^2 already
    } else if (a.clamped) {
      be.swiglu_clamped(glu);
    } else if (a.gelu_tanh) {  // GEGLU: gelu_tanh(gate) * up (the gate and up halves side by side)
      const Matrix gate = gate_up.m.col_slice(0, inter);  // [n, I]
      be.gelu({.x = gate, .y = gate, .gelu = GeluApprox::kTanh});
      be.mul({gate, gate_up.m.col_slice(inter, inter), act.m});
    } else {
      be.swiglu(glu);
    }
    Buffer down(n, h);
    expert_matmul(act.m, ew.down, ew.down_bias, down.m);
    be.scatter_add({down.m, tokens[e], a.input_scaling ? std::span<const float>{} : weights[e], a.out});
  }
}

}  // namespace day0
