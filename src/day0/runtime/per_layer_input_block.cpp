// Per-layer inputs (per-layer embeddings, ModelSpec::per_layer_input): once a step, a P-wide input for every
// layer from the token-identity table (rows gathered from the checkpoint, never expanded) and a projection
// of the scaled embeddings; in each layer, after its FFN, a gated projection of that input added to the
// residual stream. Every step rounds where transformers' BF16 model rounds.
#include <cmath>

#include "day0/runtime/blocks.h"

namespace day0::blocks {

void per_layer_inputs(const Context& c, const ModelWeights& w, std::span<const int32_t> ids, ConstMatrix x,
                      Matrix out) {
  const ModelSpec& s = c.spec;
  const int64_t t = x.rows, p = s.per_layer_input->width, width = s.n_layers * p;
  const auto eps = static_cast<float>(s.rms_norm_eps);
  // Token identity: the table's rows times sqrt(P), the scale in the weights' dtype like the embedding's.
  Buffer identity(c.arena, t, width);  // [T, n_layers * P]
  c.be.embedding({w.per_layer_embedding, ids, identity.m});
  round_activations(c, identity.m);
  const float table_scale =
      activation_scalar(c, std::sqrt(static_cast<double>(p)), s.embedding_scale_rounded);
  c.be.scale({.x = identity.m, .y = identity.m, .scale = table_scale});
  round_activations(c, identity.m);
  // Context: x W^T times 1 / sqrt(H), then an RMSNorm of each layer's P columns.
  linear(c, x, w.per_layer_model_projection, out);
  c.be.scale(
      {.x = out, .y = out, .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hidden_size)))});
  round_activations(c, out);
  const Matrix rows(out.data, t * s.n_layers, p);  // [T * n_layers, P]
  rms_norm(c, rows, w.per_layer_projection_norm, eps, rows);
  // (context + identity) / sqrt(2).
  c.be.add({out, identity.m, out});
  round_activations(c, out);
  c.be.scale({.x = out, .y = out, .scale = static_cast<float>(1.0 / std::sqrt(2.0))});
  round_activations(c, out);
}

void per_layer_input(const Context& c, int64_t layer, const PerLayerInputWeights& w, ConstMatrix inputs,
                     Matrix x) {
  const ModelSpec& s = c.spec;
  const int64_t t = x.rows, p = s.per_layer_input->width;
  Buffer gate(c.arena, t, p), y(c.arena, t, s.hidden_size);  // [T, P], [T, H]
  linear(c, x, w.gate, gate.m);
  c.be.gelu({.x = gate.m, .y = gate.m, .gelu = GeluApprox::kTanh});
  round_activations(c, gate.m);
  c.be.mul({gate.m, inputs.col_slice(layer * p, p), gate.m});
  round_activations(c, gate.m);
  linear(c, gate.m, w.projection, y.m);
  rms_norm(c, y.m, w.norm, static_cast<float>(s.rms_norm_eps), y.m);
  c.be.add({x, y.m, x});
  round_activations(c, x);
}

}  // namespace day0::blocks
