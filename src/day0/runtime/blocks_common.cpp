// Blocks every family uses: activation rounding, RMSNorm, projections, RoPE frequencies per sequence.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "day0/core/numeric.h"
#include "day0/dist/communicator.h"
#include "day0/runtime/blocks.h"

namespace day0::blocks {

void StepArena::begin_step() {
  if (!overflow_.empty() || high_ > main_.size()) {
    main_.assign(std::max(high_, main_.size()), 0.0f);
    overflow_.clear();
  }
  used_ = 0;
  live_ = 0;
  high_ = 0;
}

float* StepArena::take(int64_t n) {
  const size_t want = (static_cast<size_t>(std::max<int64_t>(n, 1)) + 15) / 16 * 16;  // 64-byte multiples
  live_ += want;
  high_ = std::max(high_, live_);
  float* p = nullptr;
  if (overflow_.empty() && used_ + want <= main_.size()) {
    p = main_.data() + used_;
    used_ += want;
  } else {
    overflow_.emplace_back(want);
    p = overflow_.back().data();
  }
  std::fill(p, p + want, 0.0f);
  return p;
}

void StepArena::release(const Mark& m) {
  D0_CHECK(m.used <= used_ && m.live <= live_ && m.chunks <= overflow_.size());
  used_ = m.used;
  live_ = m.live;
  overflow_.resize(m.chunks);
}

void round_activations(const Context& c, Matrix m) {
  if (!c.bf16()) return;
  c.be.round_bf16({.x = m, .y = m});
}

KvDtype bind_recurrent_states(const Context& c, int64_t layer, std::string_view block) {
  StepLayout& l = c.layout;
  l.conv.clear();
  l.delta.clear();
  l.conv_rest.clear();
  l.delta_rest.clear();
  l.snapshots.clear();
  KvDtype window_dtype = KvDtype::kF32;
  for (size_t sq = 0; sq < l.caches.size(); ++sq) {
    const RecurrentLayerState st = l.caches[sq]->recurrent(layer);  // copied first if shared
    D0_CHECK_MSG(st.tokens != nullptr, fmt::format("{}: layer {} has no recurrent state", block, layer));
    D0_CHECK_MSG(*st.tokens == l.pos0[sq],
                 *st.tokens < 0
                     ? fmt::format("{}: layer {}'s recurrent state was lost by a failed step; the sequence "
                                   "must restart",
                                   block, layer)
                     : fmt::format("{}: layer {}'s recurrent state holds {} tokens, the sequence {}", block,
                                   layer, *st.tokens, l.pos0[sq]));
    window_dtype = l.caches[sq]->window_dtype();
    const int64_t at = sq < l.snapshot_at.size() ? l.snapshot_at[sq] : 0;
    const int64_t first = at > 0 ? at : l.rows[sq];
    l.conv.push_back({l.row0[sq], first, st.window});
    l.delta.push_back({l.row0[sq], first, st.state});
    if (at > 0) {
      l.snapshots.push_back(sq);
      if (at < l.rows[sq]) {
        l.conv_rest.push_back({l.row0[sq] + at, l.rows[sq] - at, st.window});
        l.delta_rest.push_back({l.row0[sq] + at, l.rows[sq] - at, st.state});
      }
    }
    *st.tokens += l.rows[sq];
  }
  return window_dtype;
}

void recurrent_conv(const Context& c, int64_t layer, CausalConv1dArgs a) {
  const StepLayout& l = c.layout;
  a.seqs = l.conv;
  c.be.causal_conv1d(a);
  if (l.snapshots.empty()) return;
  c.be.synchronize();  // the windows are read on the host
  for (const size_t sq : l.snapshots) l.caches[sq]->snapshot_window(layer);
  if (l.conv_rest.empty()) return;
  a.seqs = l.conv_rest;
  c.be.causal_conv1d(a);
}

namespace {

template <class Args>
void scan_in_two(const Context& c, int64_t layer, Args a, void (Backend::*kernel)(const Args&)) {
  const StepLayout& l = c.layout;
  a.seqs = l.delta;
  (c.be.*kernel)(a);
  if (l.snapshots.empty()) return;
  c.be.synchronize();  // the states are read on the host
  for (const size_t sq : l.snapshots) l.caches[sq]->snapshot_state(layer);
  if (l.delta_rest.empty()) return;
  a.seqs = l.delta_rest;
  (c.be.*kernel)(a);
}

}  // namespace

void recurrent_scan(const Context& c, int64_t layer, GatedDeltaRuleArgs a) {
  scan_in_two(c, layer, a, &Backend::gated_delta_rule);
}

void recurrent_scan(const Context& c, int64_t layer, SsmScanArgs a) {
  scan_in_two(c, layer, a, &Backend::ssm_scan);
}

void scale_q_by_temperature(const Context& c, Matrix q) {
  const ModelSpec& s = c.spec;
  for (int64_t r = 0; r < q.rows; ++r) {
    const auto p = static_cast<double>(c.layout.positions[static_cast<size_t>(r)]);
    const double offset = static_cast<double>(s.attn_temperature_position_offset);
    auto factor = static_cast<float>(
        1.0 + s.attn_scale * std::log1p(std::floor((p + offset) / static_cast<double>(s.floor_scale))));
    if (s.attn_temperature_factor_rounded && c.bf16()) factor = bf16_to_f32(f32_to_bf16(factor));
    Matrix row = q.row_slice(r, 1);
    c.be.scale({row, row, -INFINITY, INFINITY, factor, 0.0f, 0.0f});
  }
  round_activations(c, q);
}

void watch_finite(const Context& c, ConstMatrix y) {
  if (c.watch == nullptr || c.watch->sum.data == nullptr || y.cols == 0) return;
  const int64_t t = c.watch->sum.rows;
  // Per-head rows ([T * heads, d], contiguous) are read as [T, heads * d].
  if (y.rows != t && y.rows % t == 0 && y.stride == y.cols) y = ConstMatrix(y.data, t, y.rows / t * y.cols);
  if (y.rows != t) return;
  c.be.row_mean({.x = y, .y = c.watch->scratch});
  c.be.add({c.watch->sum, c.watch->scratch, c.watch->sum});
}

float activation_scalar(const Context& c, double value, bool rounded) {
  const auto f = static_cast<float>(value);
  return rounded && c.bf16() ? bf16_to_f32(f32_to_bf16(f)) : f;
}

void rms_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y) {
  // The usual transformers RMSNorm casts x * rsqrt(...) to the activation dtype before multiplying by the
  // weight; families with norm_gain_f32 apply the gain in float32 and cast the weighted result.
  if (!c.bf16() || weight.empty() || c.spec.norm_gain_f32) {
    c.be.rms_norm({x, weight, eps, y});
    round_activations(c, y);
    return;
  }
  c.be.rms_norm({x, {}, eps, y});
  round_activations(c, y);
  const ConstMatrix w(weight.data(), 1, static_cast<int64_t>(weight.size()));
  c.be.mul({y, w, y});
  round_activations(c, y);
}

void decoder_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y) {
  if (!c.spec.layer_norm_decoder) return rms_norm(c, x, weight, eps, y);
  c.be.layer_norm({.x = x, .weight = weight, .bias = {}, .eps = eps, .y = y});
  round_activations(c, y);
}

void matmul(const Context& c, ConstMatrix x, const Linear& w, Matrix y) {
  c.be.matmul(
      {.x = x, .w = w.w, .bias = w.bias, .y = y, .exact = c.exact(), .row_invariant = c.row_invariant});
}

void linear(const Context& c, ConstMatrix x, const Linear& w, Matrix y) {
  matmul(c, x, w, y);
  round_activations(c, y);
}

void finish_row_parallel(const Context& c, Matrix y) {
  if (c.tp != nullptr && c.tp->size() > 1) {
    D0_CHECK_MSG(y.contiguous(), "row-parallel output must be contiguous to be summed over ranks");
    c.be.synchronize();
    dist::check_comm(c.tp->all_reduce_sum(std::span<float>(y.data, static_cast<size_t>(y.rows * y.cols))));
  }
  round_activations(c, y);
}

RopeFrequencies rope_for_sequence(const Context& c, int64_t s, int64_t rotary_dim) {
  if (c.spec.rope.type != RopeType::kDynamic) return c.rope;
  const size_t i = static_cast<size_t>(s);
  const int64_t seq_len = c.layout.pos0[i] + c.layout.rows[i];
  auto f =
      rope_frequencies(c.spec.rope_theta, rotary_dim, c.spec.rope, c.spec.max_position_embeddings, seq_len);
  D0_CHECK_MSG(f.is_ok(), f.status().to_string());
  return std::move(f).value();
}

void rope_rows(const Context& c, Matrix x, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
               std::optional<RopeLayout> layout, const RopeFrequencies* freqs) {
  const ModelSpec& s = c.spec;
  const RopeLayout order = layout.value_or(s.rope_layout);
  if (freqs != nullptr || s.rope.type != RopeType::kDynamic) {
    const RopeFrequencies& f = freqs != nullptr ? *freqs : c.rope;
    c.be.rope({x, c.layout.positions, n_heads, head_dim, rotary_dim, order, f.inv_freq, f.attention_factor});
    return;
  }
  for (size_t sq = 0; sq < c.layout.caches.size(); ++sq) {
    const int64_t r0 = c.layout.row0[sq], rn = c.layout.rows[sq];
    if (rn == 0) continue;
    const RopeFrequencies f = rope_for_sequence(c, static_cast<int64_t>(sq), rotary_dim);
    const std::span<const int64_t> pos(c.layout.positions.data() + r0, static_cast<size_t>(rn));
    c.be.rope(
        {x.row_slice(r0, rn), pos, n_heads, head_dim, rotary_dim, order, f.inv_freq, f.attention_factor});
  }
}

void append_and_page(const Context& c, int64_t layer, ConstMatrix first, ConstMatrix second) {
  StepLayout& l = c.layout;
  l.paged.resize(l.caches.size());
  l.kv_slots.clear();
  l.kv_copies.clear();
  // Books first (sequences in batch order: their slots line up with the step's rows), then the copies
  // of shared blocks, then every row of the step in one write.
  for (size_t sq = 0; sq < l.caches.size(); ++sq) {
    if (l.rows[sq] > 0) l.caches[sq]->append_slots(layer, l.rows[sq], l.kv_slots, l.kv_copies);
  }
  if (!l.caches.empty() && first.rows > 0) {
    const KvBlockTable table = l.caches[0]->pool().table();  // after the step's allocations
    D0_CHECK_MSG(table.space == c.be.memory_space(), "KV pool and backend are in different memory spaces");
    if (!l.kv_copies.empty())
      c.be.kv_copy_blocks({l.kv_copies.src, l.kv_copies.dst, l.kv_copies.rows, table});
    c.be.kv_write({first, second, l.kv_slots, table});
  }
  // Views after every append: an append may grow the pool's block table.
  for (size_t sq = 0; sq < l.caches.size(); ++sq) {
    l.paged[sq] = PagedSequence{l.row0[sq], l.rows[sq], l.pos0[sq], l.caches[sq]->pages(layer)};
  }
}

void page_layer(const Context& c, int64_t layer) {
  StepLayout& l = c.layout;
  l.paged.resize(l.caches.size());
  for (size_t sq = 0; sq < l.caches.size(); ++sq) {
    l.paged[sq] = PagedSequence{l.row0[sq], l.rows[sq], l.pos0[sq], l.caches[sq]->pages(layer)};
  }
}

}  // namespace day0::blocks
