// Hyper-connections (ModelSpec::hyper_connections): the residual as n streams [T, n H], collapsed into each
// block's input and the block's output spread back over them (docs/ops.md, "Hyper-connections").
#include "day0/runtime/blocks.h"

namespace day0::blocks {

namespace {

// mixes [T, outputs] = rms_norm(streams) fn^T over all n H columns, float32 in every precision (the
// reference keeps its hyper-connection modules and their input in float32).
void stream_mixes(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams, Matrix mixes) {
  Buffer normed(c.arena, streams.rows, streams.cols);  // [T, n H]
  c.be.rms_norm({streams, {}, static_cast<float>(c.spec.rms_norm_eps), normed.m});
  c.be.matmul({.x = normed.m, .w = w.fn.w, .y = mixes, .exact = true, .row_invariant = c.row_invariant});
}

// The streams' mixes ([T, mix_width]), their weights and the collapsed input, rounded once to the
// activation dtype: a layer's (width (2 + n) n: post and comb as well) or the head's (width n: pre only,
// post and comb empty).
void collapse_streams(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams,
                      int64_t mix_width, Matrix post, Matrix comb, Matrix out) {
  const HyperConnectionSpec& hc = *c.spec.hyper_connections;
  const int64_t t = streams.rows, n = hc.streams;
  Buffer mixes(c.arena, t, mix_width), pre(c.arena, t, n);  // [T, mix_width], [T, n]
  stream_mixes(c, w, streams, mixes.m);
  c.be.hc_weights({.mixes = mixes.m,
                   .base = w.base,
                   .scale = w.scale,
                   .n_streams = n,
                   .sinkhorn_iters = hc.sinkhorn_iters,
                   .eps = static_cast<float>(hc.eps),
                   .pre = pre.m,
                   .post = post,
                   .comb = comb});
  c.be.hc_collapse({.streams = streams, .pre = pre.m, .out = out, .n_streams = n});
  round_activations(c, out);  // float32 products and sum, cast once to the activation dtype
}

}  // namespace

void hc_collapse(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams, Matrix post,
                 Matrix comb, Matrix out) {
  collapse_streams(c, w, streams, c.spec.hyper_connections->mix_width(), post, comb, out);
}

void hc_expand(const Context& c, ConstMatrix x, ConstMatrix post, ConstMatrix comb, Matrix streams) {
  const int64_t n = c.spec.hyper_connections->streams;
  Buffer mixed(c.arena, streams.rows, streams.cols);  // [T, n H]: the op's output never aliases its input
  c.be.hc_expand({.x = x,
                  .streams = streams,
                  .post = post,
                  .comb = comb,
                  .out = mixed.m,
                  .n_streams = n,
                  .bf16_steps = c.bf16()});
  c.be.copy_columns({.x = mixed.m, .y = streams, .width = streams.cols});
}

void hc_head(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams, Matrix out) {
  collapse_streams(c, w, streams, c.spec.hyper_connections->streams, {}, {}, out);
}

}  // namespace day0::blocks
