// Hyper-connections (mHC) on the cpu backend. The weights are a few dozen numbers a token, computed in
// float32 in transformers' order; the collapse and the expansion are axpy over the streams' rows.
#include <algorithm>
#include <cmath>

#include "day0/backends/cpu/cpu_hyper_connections.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

namespace {

constexpr int64_t kMaxStreams = 16;  // comb of one token on the stack

float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

// Tokens per parallel chunk: enough elements to pay for a wake-up.
int64_t token_grain(int64_t elements_per_token) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(elements_per_token, 1));
}

}  // namespace

void hc_weights(const Context& c, const HcWeightsArgs& a) {
  check_args(a);
  const int64_t n = a.n_streams;
  D0_CHECK_MSG(n <= kMaxStreams, "hc_weights: more than 16 streams");
  c.pool.parallel_for(a.mixes.rows, token_grain(a.mixes.cols * a.sinkhorn_iters),
                      [&](int64_t t0, int64_t t1) {
                        float comb[kMaxStreams * kMaxStreams];  // [n, n] of one token
                        for (int64_t t = t0; t < t1; ++t) {
                          const float* m = a.mixes.row(t);
                          for (int64_t j = 0; j < n; ++j)
                            a.pre.row(t)[j] = sigmoid(m[j] * a.scale[0] + a.base[j]) + a.eps;
                          if (a.head()) continue;
                          for (int64_t j = 0; j < n; ++j)
                            a.post.row(t)[j] = 2.0f * sigmoid(m[n + j] * a.scale[1] + a.base[n + j]);
                          for (int64_t i = 0; i < n; ++i) {
                            float* row = comb + i * n;
                            for (int64_t j = 0; j < n; ++j)
                              row[j] = m[2 * n + i * n + j] * a.scale[2] + a.base[2 * n + i * n + j];
                            const float top = *std::max_element(row, row + n);
                            float sum = 0.0f;
                            for (int64_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - top));
                            for (int64_t j = 0; j < n; ++j) row[j] = row[j] / sum + a.eps;
                          }
                          const auto normalise_columns = [&] {
                            for (int64_t j = 0; j < n; ++j) {
                              float sum = 0.0f;
                              for (int64_t i = 0; i < n; ++i) sum += comb[i * n + j];
                              for (int64_t i = 0; i < n; ++i) comb[i * n + j] /= sum + a.eps;
                            }
                          };
                          normalise_columns();
                          for (int64_t iter = 1; iter < a.sinkhorn_iters; ++iter) {
                            for (int64_t i = 0; i < n; ++i) {
                              float* row = comb + i * n;
                              float sum = 0.0f;
                              for (int64_t j = 0; j < n; ++j) sum += row[j];
                              for (int64_t j = 0; j < n; ++j) row[j] /= sum + a.eps;
                            }
                            normalise_columns();
                          }
                          std::copy(comb, comb + n * n, a.comb.row(t));
                        }
                      });
}

void hc_collapse(const Context& c, const HcCollapseArgs& a) {
  check_args(a);
  const int64_t h = a.out.cols;
  c.pool.parallel_for(a.streams.rows, token_grain(a.streams.cols), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = a.out.row(t);
      std::fill(out, out + h, 0.0f);
      for (int64_t j = 0; j < a.n_streams; ++j) c.k.axpy(a.pre.row(t)[j], a.streams.row(t) + j * h, out, h);
    }
  });
}

void hc_expand(const Context& c, const HcExpandArgs& a) {
  check_args(a);
  const int64_t n = a.n_streams, h = a.x.cols;
  c.pool.parallel_for(a.x.rows, token_grain(a.out.cols * n), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x.row(t);
      const float* streams = a.streams.row(t);
      const float* comb = a.comb.row(t);
      for (int64_t k = 0; k < n; ++k) {
        float* out = a.out.row(t) + k * h;
        if (a.bf16_steps) {  // rare (a bf16 run); every step rounded as transformers' tensors are
          const float post = round_to_bf16(a.post.row(t)[k]);
          for (int64_t d = 0; d < h; ++d) {
            float mixed = 0.0f;
            for (int64_t j = 0; j < n; ++j) mixed += round_to_bf16(comb[j * n + k]) * streams[j * h + d];
            out[d] = round_to_bf16(round_to_bf16(post * x[d]) + round_to_bf16(mixed));
          }
          continue;
        }
        std::fill(out, out + h, 0.0f);
        c.k.axpy(a.post.row(t)[k], x, out, h);
        for (int64_t j = 0; j < n; ++j) c.k.axpy(comb[j * n + k], streams + j * h, out, h);
      }
    }
  });
}

}  // namespace day0::cpu
