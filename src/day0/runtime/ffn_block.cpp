// Feed-forward blocks: dense SwiGLU, and MoE (router -> top-k -> experts, plus a shared expert, optionally
// gated with sigmoid(x . w)).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "day0/dist/communicator.h"
#include "day0/dist/expert_placement.h"
#include "day0/runtime/blocks.h"

namespace day0::blocks {

namespace {

// The clamp of the model's clamped SwiGLU in the dense MLPs and shared experts: the plain clamp
// (MoeSpec::swiglu_plain_clamp, shared with the routed experts), SwiGLU-OAI's (mlp_swiglu_limit), or none
// (limit 0).
SwigluArgs mlp_clamp(const ModelSpec& s) {
  if (s.moe && s.moe->swiglu_plain_clamp)
    return {.limit = static_cast<float>(s.moe->swiglu_limit), .alpha = 1.0f, .up_shift = 0.0f};
  return {.limit = static_cast<float>(s.mlp_swiglu_limit), .alpha = static_cast<float>(s.mlp_swiglu_alpha)};
}

// The SwiGLU up to the down projection: y = down(swiglu(gate x, up x)), float32 and not rounded; a
// partial sum over the TP group under tensor parallelism (this rank's FFN columns).
void swiglu_partial(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out) {
  if (c.spec.relu2_mlp) {                      // ungated: down(relu(up x)^2), the square rounded like torch's
    Buffer act(c.arena, h.rows, w.up.w.rows);  // [T, intermediate]
    linear(c, h, w.up, act.m);
    c.be.clamp({.x = act.m, .y = act.m, .lo = 0.0f});
    c.be.mul({act.m, act.m, act.m});
    round_activations(c, act.m);
    matmul(c, act.m, w.down, out);  // [T, hidden]
    return;
  }
  const int64_t t = h.rows, width = w.gate.w.rows;
  Buffer gate(c.arena, t, width), up(c.arena, t, width), act(c.arena, t, width);  // [T, intermediate]
  linear(c, h, w.gate, gate.m);
  linear(c, h, w.up, up.m);
  if (c.spec.gelu_tanh_mlp) {  // GEGLU: gelu_tanh(gate), rounded, times up
    c.be.gelu({.x = gate.m, .y = gate.m, .gelu = GeluApprox::kTanh});
    round_activations(c, gate.m);
    c.be.mul({gate.m, up.m, act.m});
  } else if (SwigluArgs clamp = mlp_clamp(c.spec); clamp.limit > 0) {
    clamp.gate = gate.m;
    clamp.up = up.m;
    clamp.out = act.m;
    c.be.swiglu_clamped(clamp);
  } else {
    c.be.swiglu({gate.m, up.m, act.m});
  }
  round_activations(c, act.m);
  matmul(c, act.m, w.down, out);  // [T, hidden]
}

// Router -> top-k: ids [T, k] (from the step's arena) and their weights [T, k]. Identical on every
// rank of a parallel run (the same h, the same replicated router).
struct Routing {
  int32_t* ids = nullptr;  // [T, k]
  Buffer weights;          // [T, k]
};

Routing route(const Context& c, const MoeWeights& w, ConstMatrix h) {
  const ModelSpec& s = c.spec;
  const MoeSpec& m = *s.moe;
  // Zero-computation experts are scored beside the real ones.
  const int64_t t = h.rows, e = m.n_experts + m.n_zero_experts, k = m.experts_per_token;
  Buffer normed;  // [T, H] the router's own normed input (router_input_norm)
  if (m.router_input_norm) {
    // Weightless RMSNorm, times the stored gain, times 1 / sqrt(H) (a float scalar, not rounded itself),
    // each product rounded as the reference rounds it.
    normed = Buffer(c.arena, t, h.cols);
    rms_norm(c, h, {}, static_cast<float>(s.rms_norm_eps), normed.m);
    const ConstMatrix gain(w.router_input_scale.data(), 1, h.cols);  // [1, H]
    c.be.mul({normed.m, gain, normed.m});
    round_activations(c, normed.m);
    const float root = activation_scalar(c, 1.0 / std::sqrt(static_cast<double>(h.cols)), false);
    c.be.scale({.x = normed.m, .y = normed.m, .scale = root});
    round_activations(c, normed.m);
    h = normed.m;
  }
  Buffer logits(c.arena, t, e);  // [T, E (+ zero experts)]
  matmul(c, h, w.router, logits.m);
  watch_finite(c, logits.m);  // top-k would skip a NaN logit
  // The family's rounding points: float32 router logits, or the gate run in the activation dtype; float32
  // routing weights scale the expert output before it is rounded.
  const bool fp32_router = s.router_logits_f32;
  if (!fp32_router) round_activations(c, logits.m);
  if (m.router_logit_softcap > 0.0) {  // c tanh(z / c) = 2c sigmoid(2z / c) - c, float32 like the scores
    const auto cap = static_cast<float>(m.router_logit_softcap);
    c.be.scale({.x = logits.m, .y = logits.m, .scale = 2.0f / cap});
    c.be.sigmoid({logits.m, logits.m});
    c.be.scale({.x = logits.m, .y = logits.m, .scale = 2.0f * cap, .shift = -cap});
  }
  const bool fp32_weights = s.routing_weights_f32;

  Routing out;
  out.ids = reinterpret_cast<int32_t*>(c.arena.take(t * k));  // [T, k] expert ids (4-byte slots)
  out.weights = Buffer(c.arena, t, k);                        // [T, k]
  MoeRouterArgs r;
  r.logits = logits.m;
  r.correction_bias = w.correction_bias;
  r.scoring = m.scoring;
  r.method = m.topk_method;
  r.top_k = k;
  r.n_group = m.n_group;
  r.topk_group = m.topk_group;
  r.norm_topk_prob = m.norm_topk_prob;
  r.renorm_eps = fp32_router ? 1e-20f : 0.0f;
  r.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  r.expert_ids = MatrixView<int32_t>(out.ids, t, k);
  r.expert_weights = out.weights.m;
  if (m.per_expert_scale) r.expert_scale = w.expert_scale;  // [E] after the normalization
  if (w.hash_table.rows > 0) {  // a hash-routed layer: the picks are the token's table row
    D0_CHECK_MSG(static_cast<int64_t>(c.token_ids.size()) == t,
                 "moe: a hash-routed layer without its token ids");
    r.hash_table = w.hash_table;
    r.token_ids = c.token_ids;
  }
  c.be.moe_router(r);
  if (!fp32_weights) round_activations(c, out.weights.m);
  return out;
}

// The routing weights the all-reduce combine's kernel call takes on this rank: `r`'s, except that
// zero-computation experts (their output is the input itself, added by every call) weigh 0
// on all ranks of the group but its first, which adds them once for the sum.
ConstMatrix weights_for_sum(const Context& c, const Routing& r) {
  const MoeSpec& m = *c.spec.moe;
  if (m.n_zero_experts == 0 || c.moe == nullptr || c.moe->rank() == 0) return r.weights.m;
  const int64_t t = r.weights.m.rows, k = r.weights.m.cols;
  Buffer w(c.arena, t, k);  // [T, k]
  c.be.synchronize();       // the router's picks are read here
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      w.m.row(i)[j] = r.ids[i * k + j] >= m.n_experts ? 0.0f : r.weights.m.row(i)[j];
    }
  }
  return w.m;
}

// The step's first position: what rotates a replicated expert's picks between its copies from step to
// step (the same on every rank).
int64_t pick_rotation(const Context& c) {
  return c.layout.positions.empty() ? 0 : c.layout.positions.front();
}

// The rank that computes each pick of `r` [T * k] (dist::dispatch_picks; -1 for zero-computation
// experts), from the step's arena.
std::span<int32_t> pick_ranks(const Context& c, const MoeWeights& w, const Routing& r, int64_t t, int64_t k) {
  std::span<int32_t> ranks(reinterpret_cast<int32_t*>(c.arena.take(t * k)), static_cast<size_t>(t * k));
  dist::dispatch_picks(*w.placement, std::span<const int32_t>(r.ids, static_cast<size_t>(t * k)),
                       pick_rotation(c), ranks);
  return ranks;
}

// The picks this rank's all-reduce call computes: `r`'s ids, with the picks of replicated experts that
// another copy computes marked kPickedElsewhere. Without copies the slot map alone says what is here.
const int32_t* ids_computed_here(const Context& c, const MoeWeights& w, const Routing& r, int64_t t,
                                 int64_t k) {
  if (w.placement == nullptr || !w.placement->replicated()) return r.ids;
  c.be.synchronize();  // the router's picks are read here
  const std::span<int32_t> ranks = pick_ranks(c, w, r, t, k);
  const int me = c.ep != nullptr ? c.ep->rank() : 0;
  for (int64_t i = 0; i < t * k; ++i) {
    const auto at = static_cast<size_t>(i);
    if (ranks[at] >= 0 && ranks[at] != me)
      ranks[at] = MoeExpertsArgs::kPickedElsewhere;
    else
      ranks[at] = r.ids[i];
  }
  return ranks.data();
}

// Adds `ids` [n] (the picks this rank computes) to its per-slot counts of `layer`.
void count_computed(const Context& c, int64_t layer, const MoeWeights& w, const int32_t* ids, int64_t n) {
  if (c.picks == nullptr) return;
  c.be.synchronize();
  std::vector<int64_t>& counts = c.picks->computed[static_cast<size_t>(layer)];
  counts.resize(w.experts.size());
  const int64_t n_experts = c.spec.moe->n_experts;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= n_experts) continue;
    const int64_t slot = w.slot_of(id);
    if (slot >= 0) ++counts[static_cast<size_t>(slot)];
  }
}

// Adds the router's picks of `layer` to its counts.
void count_routed(const Context& c, int64_t layer, const Routing& r, int64_t n) {
  if (c.picks == nullptr) return;
  const int64_t n_experts = c.spec.moe->n_experts, n_layers = c.spec.n_layers;
  c.picks->routed.resize(static_cast<size_t>(n_layers));
  c.picks->computed.resize(static_cast<size_t>(n_layers));
  c.be.synchronize();  // the router's picks are read here
  std::vector<int64_t>& counts = c.picks->routed[static_cast<size_t>(layer)];
  counts.resize(static_cast<size_t>(n_experts));
  for (int64_t i = 0; i < n; ++i) {
    if (r.ids[i] >= 0 && r.ids[i] < n_experts) ++counts[static_cast<size_t>(r.ids[i])];
  }
}

// The routed experts this rank holds (all of them in one process) over rows x [N, H] whose picks are
// ids / weights [N, k']: out [N, H] = their weighted sum, float32, not rounded.
MoeExpertsArgs experts_args(const Context& c, const MoeWeights& w, ConstMatrix x,
                            MatrixView<const int32_t> ids, ConstMatrix weights, Matrix out) {
  const MoeSpec& m = *c.spec.moe;
  MoeExpertsArgs a;
  a.x = x;
  a.expert_ids = ids;
  a.expert_weights = weights;
  a.experts = w.experts;
  a.expert_slot = w.expert_slot;
  a.n_experts = m.n_experts;
  a.layout = w.layout;
  a.clamped = m.swiglu_limit > 0;
  a.relu2 = c.spec.relu2_mlp;
  a.gelu_tanh = c.spec.gelu_tanh_mlp;
  a.limit = static_cast<float>(m.swiglu_limit > 0 ? m.swiglu_limit : 7.0);
  a.alpha = m.swiglu_plain_clamp ? 1.0f : static_cast<float>(m.swiglu_alpha);
  a.up_shift = m.swiglu_plain_clamp ? 0.0f : 1.0f;
  a.input_scaling = m.topk_method == TopkMethod::kLogitsThenSigmoid;
  a.n_zero_experts = m.n_zero_experts;
  a.out = out;
  a.exact = c.exact();
  a.row_invariant = c.row_invariant;
  return a;
}

// The per-token sigmoid gate of the shared expert (shared_expert_gate): g [T, 1].
void shared_gate(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix g) {
  linear(c, h, w.shared_gate, g);
  c.be.sigmoid({g, g});
  round_activations(c, g);
}

// shared [T, H] = the (gated) shared expert of rows h, rounded as one process rounds it.
void shared_expert(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix shared) {
  dense_mlp(c, w.shared, h, shared);
  if (w.shared_gate.present()) {
    Buffer g(c.arena, h.rows, 1);  // [T, 1] sigmoid gate per token
    shared_gate(c, w, h, g.m);
    c.be.mul({shared, g.m, shared});
    round_activations(c, shared);
  }
}

// out += the (gated) shared expert of rows h, rounded as one process rounds it.
void add_shared_expert(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix out) {
  Buffer shared(c.arena, h.rows, c.spec.hidden_size);  // [T, H]
  shared_expert(c, w, h, shared.m);
  c.be.add({out, shared.m, out});
  round_activations(c, out);
}

std::span<float> floats_of(Matrix m) {
  D0_CHECK_MSG(m.contiguous(), "a MoE output summed over ranks must be contiguous");
  return {m.data, static_cast<size_t>(m.rows * m.cols)};
}

// MoeCombine::kAllReduce: each rank's partial output (its experts, its expert-TP width), summed over
// the TP x EP group. The shared expert's rows are split over the EP ranks in balanced blocks (each
// computes its TP share of its rows; the others are 0 in its partial), so that no rank runs it for
// the whole step while its peers wait in the sum; a one-row decode step's shared expert runs on one
// rank.
void moe_all_reduce(const Context& c, int64_t layer, const MoeWeights& w, ConstMatrix h, const Routing& r,
                    Matrix out) {
  const int64_t t = h.rows, k = c.spec.moe->experts_per_token;
  const int32_t* ids = ids_computed_here(c, w, r, t, k);  // [T, k]
  count_computed(c, layer, w, ids, t * k);
  const dist::ExpertBlock shared_rows =
      c.ep == nullptr ? dist::ExpertBlock{0, t} : dist::balanced_block(t, c.ep->size(), c.ep->rank());
  if (c.options.comm_overlap && w.shared.present() && (c.tp == nullptr || c.tp->size() == 1)) {
    // The shared expert needs no other rank (whole on each: TP 1), so every EP rank computes it for
    // every row while the routed sum travels, then adds it as one process does: routed sum rounded,
    // shared rounded, their sum rounded. The sum is T x H (not the BF16 path's 2 T x H below).
    c.be.moe_experts(experts_args(c, w, h, MatrixView<const int32_t>(ids, t, k), weights_for_sum(c, r), out));
    c.be.synchronize();
    dist::check_comm(c.moe->start_all_reduce_sum(floats_of(out)));
    Buffer shared(c.arena, t, c.spec.hidden_size);  // [T, H] the whole shared expert
    shared_expert(c, w, h, shared.m);
    c.be.synchronize();
    dist::check_comm(c.moe->finish_all_reduce());
    round_activations(c, out);
    c.be.add({out, shared.m, out});
    round_activations(c, out);
    return;
  }
  if (c.bf16() && w.shared.present()) {
    // BF16: one process rounds the routed sum and the shared expert apart before adding them. Both
    // partials go in one collective (twice the bytes, the same call) and are rounded the same way, so
    // that only the order of the float32 partial sums differs.
    Buffer both(c.arena, 2 * t, c.spec.hidden_size);  // [routed rows T; shared rows T, H]
    const Matrix routed = both.m.row_slice(0, t), shared = both.m.row_slice(t, t);
    c.be.moe_experts(
        experts_args(c, w, h, MatrixView<const int32_t>(ids, t, k), weights_for_sum(c, r), routed));
    for (int64_t i = 0; i < t; ++i) {
      if (i < shared_rows.begin || i >= shared_rows.end) std::fill_n(shared.row(i), shared.cols, 0.0f);
    }
    if (shared_rows.size() > 0) {
      swiglu_partial(c, w.shared, h.row_slice(shared_rows.begin, shared_rows.size()),
                     shared.row_slice(shared_rows.begin, shared_rows.size()));
    }
    c.be.synchronize();
    dist::check_comm(c.moe->all_reduce_sum(floats_of(both.m)));
    round_activations(c, both.m);
    if (w.shared_gate.present()) {
      Buffer g(c.arena, t, 1);  // [T, 1] sigmoid gate per token
      shared_gate(c, w, h, g.m);
      c.be.mul({shared, g.m, shared});
      round_activations(c, shared);
    }
    c.be.add({routed, shared, out});
    round_activations(c, out);
    return;
  }
  c.be.moe_experts(experts_args(c, w, h, MatrixView<const int32_t>(ids, t, k), weights_for_sum(c, r), out));
  if (w.shared.present() && shared_rows.size() > 0) {
    const ConstMatrix mine = h.row_slice(shared_rows.begin, shared_rows.size());  // [rows here, H]
    const Matrix into = out.row_slice(shared_rows.begin, shared_rows.size());
    Buffer shared(c.arena, mine.rows, c.spec.hidden_size);  // [rows here, H] this TP rank's share
    swiglu_partial(c, w.shared, mine, shared.m);
    if (w.shared_gate.present()) {
      Buffer g(c.arena, mine.rows, 1);  // [rows here, 1]: g x (sum of shares) = sum of (g x share)
      shared_gate(c, w, mine, g.m);
      c.be.mul({shared.m, g.m, shared.m});
    }
    c.be.add({into, shared.m, into});
  }
  c.be.synchronize();
  dist::check_comm(c.moe->all_reduce_sum(floats_of(out)));
  round_activations(c, out);
}

// The rows [begin, end) of a step's `t` rows that EP rank `rank` of `n` owns under the all-to-all
// combine: balanced contiguous blocks, like the experts.
dist::ExpertBlock owned_rows(int64_t t, int n, int rank) {
  return dist::balanced_block(t, n, rank);
}

// Per-rank counts of float32 rows of `width` as byte counts.
std::vector<int64_t> row_bytes(std::vector<int64_t> rows, int64_t width) {
  for (int64_t& r : rows) r *= width * static_cast<int64_t>(sizeof(float));
  return rows;
}

// MoeCombine::kAllToAll (see engine.h). Messages are float32 rows; a dispatched pick is its hidden
// row followed by its expert id (the int32 bits) and its weight.
void moe_all_to_all(const Context& c, int64_t layer, const MoeWeights& w, ConstMatrix h, const Routing& r,
                    Matrix out) {
  dist::Communicator& ep = *c.ep;
  const int n = ep.size(), me = ep.rank();
  const int64_t t = h.rows, hidden = h.cols, k = c.spec.moe->experts_per_token;
  const int64_t n_experts = c.spec.moe->n_experts;
  const bool input_scaling = c.spec.moe->topk_method == TopkMethod::kLogitsThenSigmoid;
  // The rows this rank dispatches and combines: a balanced block of the step's (every rank holds the
  // same rows), or, under attention data parallelism, all of its own.
  const bool own_rows_only = c.options.data_parallel_attention;
  const dist::ExpertBlock mine = own_rows_only ? dist::ExpertBlock{0, t} : owned_rows(t, n, me);
  const int64_t width = hidden + 2;  // [hidden row, id bits, weight]
  c.be.synchronize();                // the picks and rows are read here
  // The rank that computes each pick: the expert's holder, one of its copies when it has several.
  const std::span<const int32_t> rank_of_pick = pick_ranks(c, w, r, t, k);  // [T * k]

  // Dispatch: my rows' picks, grouped by the rank that holds the expert, each group in (row, pick)
  // order.
  // Zero-computation experts (ids from n_experts on) are not dispatched: the owner adds them itself.
  std::vector<int64_t> sent(static_cast<size_t>(n), 0);  // [n] picks to each rank
  std::vector<int32_t> zero_rows;                        // [zero picks] my rows' zero-expert picks
  std::vector<float> zero_weights;                       // [zero picks]
  for (int64_t row = mine.begin; row < mine.end; ++row) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = r.ids[row * k + j];
      if (id >= n_experts) {
        zero_rows.push_back(static_cast<int32_t>(row));
        zero_weights.push_back(r.weights.m.row(row)[j]);
        continue;
      }
      ++sent[static_cast<size_t>(rank_of_pick[static_cast<size_t>(row * k + j)])];
    }
  }
  std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);  // [n + 1] offsets of the groups
  for (int p = 0; p < n; ++p)
    first[static_cast<size_t>(p) + 1] = first[static_cast<size_t>(p)] + sent[static_cast<size_t>(p)];
  const int64_t n_sent = first.back();
  Buffer send(c.arena, n_sent, width);                            // [picks sent, H + 2]
  std::vector<int32_t> pick_row(static_cast<size_t>(n_sent));     // [picks sent] the row of each
  std::vector<float> pick_weight(static_cast<size_t>(n_sent));    // [picks sent]
  std::vector<int32_t> pick_expert(static_cast<size_t>(n_sent));  // [picks sent]
  {
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t row = mine.begin; row < mine.end; ++row) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = r.ids[row * k + j];
        if (id >= n_experts) continue;
        const int64_t slot = fill[static_cast<size_t>(rank_of_pick[static_cast<size_t>(row * k + j)])]++;
        float* dst = send.m.row(slot);
        std::copy_n(h.row(row), hidden, dst);
        std::memcpy(dst + hidden, &id, sizeof(id));
        dst[hidden + 1] = r.weights.m.row(row)[j];
        pick_row[static_cast<size_t>(slot)] = static_cast<int32_t>(row);
        pick_weight[static_cast<size_t>(slot)] = dst[hidden + 1];
        pick_expert[static_cast<size_t>(slot)] = id;
      }
    }
  }
  // Counts first: every rank's row of the [n, n] pick matrix.
  std::vector<int64_t> counts(static_cast<size_t>(n) * static_cast<size_t>(n));  // [from, to]
  dist::check_comm(ep.all_gather_of<int64_t>(sent, counts));
  std::vector<int64_t> arriving(static_cast<size_t>(n));  // [n] picks each rank sends me
  for (int p = 0; p < n; ++p) arriving[static_cast<size_t>(p)] = counts[static_cast<size_t>(p * n + me)];
  int64_t n_arriving = 0;
  for (int64_t a : arriving) n_arriving += a;
  Buffer got(c.arena, n_arriving, width);  // [picks arriving, H + 2]
  dist::check_comm(ep.all_to_all_v(std::as_bytes(floats_of(send.m)), row_bytes(sent, width),
                                   std::as_writable_bytes(floats_of(got.m)), row_bytes(arriving, width)));

  // My experts on the picks that arrived: one pick per row. The output is unweighted (the owner
  // weights it, in expert order) unless the family scales the input (input_scaling).
  Buffer x(c.arena, n_arriving, hidden);                             // [picks arriving, H]
  auto* ids = reinterpret_cast<int32_t*>(c.arena.take(n_arriving));  // [picks arriving, 1]
  Buffer weights(c.arena, n_arriving, 1);                            // [picks arriving, 1]
  for (int64_t i = 0; i < n_arriving; ++i) {
    const float* src = got.m.row(i);  // [H + 2]
    std::copy_n(src, hidden, x.m.row(i));
    std::memcpy(&ids[i], src + hidden, sizeof(int32_t));
    weights.m.row(i)[0] = input_scaling ? src[hidden + 1] : 1.0f;
  }
  count_computed(c, layer, w, ids, n_arriving);
  Buffer y(c.arena, n_arriving, hidden);  // [picks arriving, H]
  if (n_arriving > 0) {
    c.be.moe_experts(experts_args(c, w, x.m, MatrixView<const int32_t>(ids, n_arriving, 1), weights.m, y.m));
    c.be.synchronize();
  }
  // Combine: the outputs go back the way the picks came.
  Buffer back(c.arena, n_sent, hidden);  // [picks sent, H]
  dist::check_comm(ep.all_to_all_v(std::as_bytes(floats_of(y.m)), row_bytes(arriving, hidden),
                                   std::as_writable_bytes(floats_of(back.m)), row_bytes(sent, hidden)));

  // My rows: the picks' outputs added in expert order (the order one process adds them in).
  Matrix own = out.row_slice(mine.begin, mine.size());  // [rows owned, H]
  for (int64_t i = 0; i < own.rows; ++i) std::fill_n(own.row(i), hidden, 0.0f);
  // Zero-computation experts first, in (row, pick) order as one process adds them (by TP rank 0 alone
  // when the owned rows are summed over the TP group).
  const bool zero_here = c.tp == nullptr || c.tp->rank() == 0;
  if (!zero_rows.empty() && zero_here) {
    const auto n_zero = static_cast<int64_t>(zero_rows.size());
    Buffer picked(c.arena, n_zero, hidden);  // [zero picks, H] their input rows
    c.be.gather_rows({h, zero_rows, picked.m});
    for (int32_t& row : zero_rows) row -= static_cast<int32_t>(mine.begin);
    c.be.scatter_add({picked.m, zero_rows, zero_weights, own});
  }
  std::vector<int32_t> order(static_cast<size_t>(n_sent));
  for (int64_t i = 0; i < n_sent; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pick_expert[static_cast<size_t>(a)] < pick_expert[static_cast<size_t>(b)];
  });
  Buffer sorted(c.arena, n_sent, hidden);  // [picks sent, H] in expert order
  std::vector<int32_t> rows(static_cast<size_t>(n_sent));
  std::vector<float> scale(static_cast<size_t>(n_sent));
  for (int64_t i = 0; i < n_sent; ++i) {
    const auto p = static_cast<size_t>(order[static_cast<size_t>(i)]);
    rows[static_cast<size_t>(i)] = static_cast<int32_t>(pick_row[p] - mine.begin);
    scale[static_cast<size_t>(i)] = input_scaling ? 1.0f : pick_weight[p];
  }
  if (n_sent > 0) {
    c.be.gather_rows({back.m, order, sorted.m});
    c.be.scatter_add({sorted.m, rows, scale, own});
  }
  if (own.rows > 0) {
    if (c.tp != nullptr && c.tp->size() > 1) {  // expert-TP: the owned rows are a sum over the TP group
      c.be.synchronize();
      dist::check_comm(c.tp->all_reduce_sum(floats_of(own)));
    }
    round_activations(c, own);
    if (w.shared.present()) add_shared_expert(c, w, h.row_slice(mine.begin, mine.size()), own);
  }

  if (own_rows_only) return;  // each rank keeps its own sequences' rows
  // Every rank gets every row: blocks padded to the largest one, gathered in rank order.
  const int64_t per = dist::largest_block(t, n);
  Buffer pad(c.arena, per, hidden);      // [largest block, H]
  Buffer all(c.arena, n * per, hidden);  // [n, largest block, H]
  c.be.synchronize();
  for (int64_t i = 0; i < own.rows; ++i) std::copy_n(own.row(i), hidden, pad.m.row(i));
  dist::check_comm(ep.all_gather_of<float>(floats_of(pad.m), floats_of(all.m)));
  for (int p = 0; p < n; ++p) {
    const dist::ExpertBlock b = owned_rows(t, n, p);
    for (int64_t i = 0; i < b.size(); ++i) std::copy_n(all.m.row(p * per + i), hidden, out.row(b.begin + i));
  }
}

}  // namespace

void dense_mlp(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out) {
  swiglu_partial(c, w, h, out);  // this rank's FFN columns' share under tensor parallelism
  finish_row_parallel(c, out);
}

// (routed + shared) x shared_combine_scale, after whichever path summed them: a power of two scales the
// rounded sum exactly as it would the exact one.
void average_with_shared(const Context& c, const MoeWeights& w, Matrix out) {
  const double scale = c.spec.moe->shared_combine_scale;
  if (!w.shared.present() || scale == 1.0) return;
  c.be.scale({.x = out, .y = out, .scale = static_cast<float>(scale)});
}

void moe(const Context& c, int64_t layer, const MoeWeights& w, ConstMatrix h, Matrix out) {
  const Routing r = route(c, w, h);
  const int64_t t = h.rows, k = c.spec.moe->experts_per_token;
  count_routed(c, layer, r, t * k);
  if (c.moe != nullptr && c.moe->size() > 1) {
    D0_CHECK_MSG(!w.latent_in.present(), "a latent MoE under expert parallelism (refused when it starts)");
    // Attention data parallelism always combines all-to-all (Engine::create refuses it otherwise).
    if (c.options.moe_combine == MoeCombine::kAllToAll && c.ep != nullptr && c.ep->size() > 1) {
      moe_all_to_all(c, layer, w, h, r, out);
    } else {
      moe_all_reduce(c, layer, w, h, r, out);
    }
    average_with_shared(c, w, out);
    return;
  }
  count_computed(c, layer, w, r.ids, t * k);
  if (w.latent_in.present()) {
    // Latent MoE: the experts read and write the latent space (their sum rounded), projected back after.
    const int64_t latent = w.latent_in.w.rows;
    Buffer lx(c.arena, t, latent), ly(c.arena, t, latent);  // [T, latent] x 2
    linear(c, h, w.latent_in, lx.m);
    c.be.moe_experts(experts_args(c, w, lx.m, MatrixView<const int32_t>(r.ids, t, k), r.weights.m, ly.m));
    round_activations(c, ly.m);
    linear(c, ly.m, w.latent_out, out);
  } else {
    c.be.moe_experts(experts_args(c, w, h, MatrixView<const int32_t>(r.ids, t, k), r.weights.m, out));
    round_activations(c, out);
  }
  if (w.shared.present()) add_shared_expert(c, w, h, out);
  average_with_shared(c, w, out);
}

void dense_mlp_beside_moe(const Context& c, int64_t layer, const LayerWeights& w, ConstMatrix x,
                          ConstMatrix h, Matrix out) {
  const auto eps = static_cast<float>(c.spec.rms_norm_eps);
  const int64_t t = x.rows, hidden = x.cols;
  Buffer dense(c.arena, t, hidden), experts_in(c.arena, t, hidden), routed(c.arena, t, hidden);  // [T, H] x 3
  dense_mlp(c, w.mlp, h, dense.m);
  rms_norm(c, dense.m, w.dense_out_norm, eps, dense.m);
  // The router reads the residual stream itself, the experts its own norm of it.
  const Routing r = route(c, w.moe, x);
  rms_norm(c, x, w.moe_in_norm, eps, experts_in.m);
  const int64_t k = c.spec.moe->experts_per_token;
  count_routed(c, layer, r, t * k);
  if (c.moe != nullptr && c.moe->size() > 1) {
    D0_CHECK_MSG(!w.moe.latent_in.present() && !w.moe.shared.present(),
                 "a dense MLP beside a latent or shared-expert MoE (refused when it starts)");
    if (c.options.moe_combine == MoeCombine::kAllToAll && c.ep != nullptr && c.ep->size() > 1) {
      moe_all_to_all(c, layer, w.moe, experts_in.m, r, routed.m);
    } else {
      moe_all_reduce(c, layer, w.moe, experts_in.m, r, routed.m);
    }
  } else {
    count_computed(c, layer, w.moe, r.ids, t * k);
    c.be.moe_experts(
        experts_args(c, w.moe, experts_in.m, MatrixView<const int32_t>(r.ids, t, k), r.weights.m, routed.m));
    round_activations(c, routed.m);
  }
  rms_norm(c, routed.m, w.moe_out_norm, eps, routed.m);
  c.be.add({dense.m, routed.m, out});
  round_activations(c, out);
}

}  // namespace day0::blocks
