#include "day0/runtime/engine.h"

#include <cstring>

#include <fmt/format.h>

#include "day0/runtime/blocks.h"

namespace day0 {

const char* precision_name(ActivationPrecision p) {
  return p == ActivationPrecision::kBF16 ? "bf16" : "f32";
}

Engine::Engine(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights, Backend& backend,
               EngineOptions options)
    : spec_(spec), weights_(std::move(weights)), backend_(backend), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(const ModelSpec& spec, std::shared_ptr<ModelWeights> weights,
                                               Backend& backend, EngineOptions options) {
  if (!weights || static_cast<int64_t>(weights->layers.size()) != spec.n_layers) {
    return invalid_argument("engine: weights do not match the model spec");
  }
  if (spec.attention == AttentionKind::kMla && !spec.mla)
    return invalid_argument("engine: MLA spec without sizes");
  for (const LayerSpec& l : spec.layers) {
    if (l.moe && !spec.moe) return invalid_argument("engine: MoE layer without MoE settings");
    if (l.mask != AttentionMask::kCausal && l.window <= 0) {
      return invalid_argument("engine: sliding or chunked layer without a window");
    }
  }
  const int64_t rotary =
      spec.attention == AttentionKind::kMla
          ? spec.mla->qk_rope_head_dim
          : static_cast<int64_t>(static_cast<double>(spec.head_dim) * spec.partial_rotary_factor) / 2 * 2;
  std::unique_ptr<Engine> e(new Engine(spec, std::move(weights), backend, options));
  if (rotary > 0) {
    D0_ASSIGN_OR_RETURN(e->rope_,
                        rope_frequencies(spec.rope_theta, rotary, spec.rope, spec.max_position_embeddings,
                                         spec.max_position_embeddings));
  }
  return e;
}

FloatMatrix Engine::forward(std::span<const SequenceStep> batch, bool last_only, ForwardCapture* capture) {
  using blocks::Buffer;
  blocks::StepLayout layout;
  std::vector<int32_t> ids;
  for (const SequenceStep& s : batch) {
    D0_CHECK_MSG(s.cache != nullptr, "forward: a sequence without a cache");
    layout.caches.push_back(s.cache);
    layout.row0.push_back(layout.total_rows);
    layout.rows.push_back(static_cast<int64_t>(s.tokens.size()));
    layout.pos0.push_back(s.cache->length());
    layout.total_rows += static_cast<int64_t>(s.tokens.size());
    ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  }
  for (int32_t id : ids)
    D0_CHECK_MSG(id >= 0 && id < spec_.vocab_size, fmt::format("token id {} outside the vocabulary", id));
  const blocks::Context c{backend_, spec_, options_, layout, rope_};
  const int64_t t = layout.total_rows, hidden = spec_.hidden_size;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  const ModelWeights& w = *weights_;

  Buffer x(t, hidden), h(t, hidden), y(t, hidden);  // residual stream, normed input, block output
  backend_.embedding({w.embedding, ids, x.m});
  blocks::round_activations(c, x.m);
  if (capture && capture->want_hidden)
    capture->hidden.assign(static_cast<size_t>(spec_.n_layers), FloatMatrix());
  for (int64_t l = 0; l < spec_.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    blocks::rms_norm(c, x.m, lw.input_norm, eps, h.m);
    if (spec_.attention == AttentionKind::kMla) {
      blocks::mla_attention(c, l, lw.attn, h.m, y.m);
    } else {
      blocks::gqa_attention(c, l, lw.attn, h.m, y.m);
    }
    backend_.add({x.m, y.m, x.m});
    blocks::round_activations(c, x.m);
    blocks::rms_norm(c, x.m, lw.post_norm, eps, h.m);
    if (spec_.layers[static_cast<size_t>(l)].moe) {
      blocks::moe(c, lw.moe, h.m, y.m);
    } else {
      blocks::dense_mlp(c, lw.mlp, h.m, y.m);
    }
    backend_.add({x.m, y.m, x.m});
    blocks::round_activations(c, x.m);
    if (capture && capture->want_hidden) {
      backend_.synchronize();
      FloatMatrix& out = capture->hidden[static_cast<size_t>(l)];
      out = FloatMatrix(t, hidden);
      std::memcpy(out.data.data(), x.data.data(), x.data.size() * sizeof(float));
    }
  }
  for (const SequenceStep& s : batch) s.cache->commit(static_cast<int64_t>(s.tokens.size()));

  blocks::rms_norm(c, x.m, w.final_norm, eps, h.m);
  if (capture && capture->want_final_norm) {
    backend_.synchronize();
    capture->final_norm = FloatMatrix(t, hidden);
    std::memcpy(capture->final_norm.data.data(), h.data.data(), h.data.size() * sizeof(float));
  }
  ConstMatrix rows = h.m;
  Buffer last;
  if (last_only) {
    std::vector<int32_t> pick;
    for (size_t s = 0; s < batch.size(); ++s) {
      D0_CHECK_MSG(layout.rows[s] > 0, "forward: last_only needs at least one token per sequence");
      pick.push_back(static_cast<int32_t>(layout.row0[s] + layout.rows[s] - 1));
    }
    last = Buffer(static_cast<int64_t>(pick.size()), hidden);
    backend_.gather_rows({h.m, pick, last.m});
    rows = last.m;
  }
  FloatMatrix logits(rows.rows, spec_.vocab_size);
  blocks::linear(c, rows, w.lm_head, Matrix(logits.data.data(), rows.rows, spec_.vocab_size));
  backend_.synchronize();
  return logits;
}

}  // namespace day0
