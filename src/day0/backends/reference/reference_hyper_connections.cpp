// Reference kernels of hyper-connections (mHC): the mixing weights with their Sinkhorn-Knopp
// normalisation, the collapse of the streams into a layer's input and the expansion back.
#include <cmath>
#include <vector>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/numeric.h"
#include "day0/ops/kernel_checks.h"

namespace day0::ref {

void hc_weights(const HcWeightsArgs& a) {
  check_args(a);
  const int64_t n = a.n_streams;
  const auto at = [n](int64_t i, int64_t j) { return static_cast<size_t>(i * n + j); };
  std::vector<double> c(static_cast<size_t>(n * n));  // [n, n] comb of one token
  for (int64_t t = 0; t < a.mixes.rows; ++t) {
    const float* m = a.mixes.row(t);
    for (int64_t j = 0; j < n; ++j) {
      a.pre.row(t)[j] = static_cast<float>(sigmoid_of(double{m[j]} * a.scale[0] + a.base[j]) + a.eps);
    }
    if (a.head()) continue;
    for (int64_t j = 0; j < n; ++j) {
      a.post.row(t)[j] = static_cast<float>(2.0 * sigmoid_of(double{m[n + j]} * a.scale[1] + a.base[n + j]));
    }
    for (int64_t i = 0; i < n; ++i) {  // row softmax, + eps
      double top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        c[at(i, j)] = double{m[2 * n + i * n + j]} * a.scale[2] + a.base[2 * n + i * n + j];
        top = std::max(top, c[at(i, j)]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) sum += (c[at(i, j)] = std::exp(c[at(i, j)] - top));
      for (int64_t j = 0; j < n; ++j) c[at(i, j)] = c[at(i, j)] / sum + a.eps;
    }
    const auto normalise_columns = [&] {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += c[at(i, j)];
        for (int64_t i = 0; i < n; ++i) c[at(i, j)] /= sum + a.eps;
      }
    };
    normalise_columns();
    for (int64_t iter = 1; iter < a.sinkhorn_iters; ++iter) {
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) sum += c[at(i, j)];
        for (int64_t j = 0; j < n; ++j) c[at(i, j)] /= sum + a.eps;
      }
      normalise_columns();
    }
    for (size_t i = 0; i < c.size(); ++i) a.comb.row(t)[i] = static_cast<float>(c[i]);
  }
}

void hc_collapse(const HcCollapseArgs& a) {
  check_args(a);
  const int64_t h = a.out.cols;
  for (int64_t t = 0; t < a.streams.rows; ++t) {
    for (int64_t d = 0; d < h; ++d) {
      double sum = 0.0;
      for (int64_t j = 0; j < a.n_streams; ++j) sum += double{a.pre.row(t)[j]} * a.streams.row(t)[j * h + d];
      a.out.row(t)[d] = static_cast<float>(sum);
    }
  }
}

void hc_expand(const HcExpandArgs& a) {
  check_args(a);
  const int64_t n = a.n_streams, h = a.x.cols;
  // bf16_steps: each step's result as transformers' bfloat16 tensors hold it.
  const auto step = [&](double v) {
    return a.bf16_steps ? double{bf16_to_f32(f32_to_bf16(static_cast<float>(v)))} : v;
  };
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t k = 0; k < n; ++k) {
      const double post = step(a.post.row(t)[k]);
      for (int64_t d = 0; d < h; ++d) {
        double mixed = 0.0;
        for (int64_t j = 0; j < n; ++j) mixed += step(a.comb.row(t)[j * n + k]) * a.streams.row(t)[j * h + d];
        a.out.row(t)[k * h + d] = static_cast<float>(step(step(post * a.x.row(t)[d]) + step(mixed)));
      }
    }
  }
}

}  // namespace day0::ref
