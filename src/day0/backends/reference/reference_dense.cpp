// Reference kernels for the dense ops: embedding, matmul, norms, activations, elementwise, primitives.
#include <cmath>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/ops/int8_activations.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/weight_row_block.h"

namespace day0::ref {

void embedding(const EmbeddingArgs& a) {
  check_args(a);
  for (size_t t = 0; t < a.ids.size(); ++t) {
    float* out = a.out.row(static_cast<int64_t>(t));
    for (int64_t c = 0; c < a.table.cols; ++c) out[c] = a.table.at(a.ids[t], c);
  }
}

namespace {

// INT8 / INT4 weights, not exact: the activations quantized to int8 per 32-column block
// (ops/int8_activations.h), then y[n] = sum over blocks b of scale_x[b] * scale_w[n, g(b)] *
// sum_{k in b} (c[n, k] - z[n, g(b)]) * q_x[k], accumulated in double.
void matmul_int8_activations(const MatmulArgs& a) {
  Int8Rows xq;
  quantize_activations(a.x, xq);
  const int64_t groups = a.w.int_groups();
  for (int64_t t = 0; t < a.x.rows; ++t) {
    const int8_t* q = xq.codes(t);
    const float* sx = xq.scales(t);
    float* y = a.y.row(t);
    for (int64_t n = 0; n < a.w.rows; ++n) {
      double acc = a.bias ? a.bias[n] : 0.0;
      for (int64_t b = 0; b < xq.blocks; ++b) {
        const int64_t g = a.w.group >= a.w.cols ? 0 : b * kIntBlock / a.w.group;
        const double s = a.w.int_scale(n * groups + g);
        // The code minus the zero point, from the scalar definition: at() / scale (exact for codes).
        double block = 0.0;
        for (int64_t k = b * kIntBlock; k < std::min(a.w.cols, (b + 1) * kIntBlock); ++k) {
          const double w = s == 0.0 ? 0.0 : static_cast<double>(a.w.at(n, k)) / s;
          block += std::nearbyint(w) * q[k];
        }
        acc += static_cast<double>(sx[b]) * s * block;
      }
      y[n] = static_cast<float>(a.accumulate ? y[n] + acc : acc);
    }
  }
}

}  // namespace

// Each group through the oracle's matmul on its slice of x and block of W's rows.
void grouped_matmul(const GroupedMatmulArgs& a) {
  check_args(a);
  const int64_t k = a.w.cols, n = a.w.rows / a.groups;
  for (int64_t g = 0; g < a.groups; ++g) {
    matmul({.x = a.x.col_slice(g * k, k),
            .w = weight_row_block(a.w, g * n, n),
            .y = a.y.col_slice(g * n, n),
            .exact = a.exact});
  }
}

void matmul(const MatmulArgs& a) {
  check_args(a);
  if (!a.exact && a.w.is_int()) {
    matmul_int8_activations(a);
    return;
  }
  for (int64_t t = 0; t < a.x.rows; ++t) {
    const float* x = a.x.row(t);
    float* y = a.y.row(t);
    for (int64_t n = 0; n < a.w.rows; ++n) {
      double acc = a.bias ? a.bias[n] : 0.0;
      for (int64_t k = 0; k < a.w.cols; ++k) acc += static_cast<double>(x[k]) * a.w.at(n, k);
      y[n] = static_cast<float>(a.accumulate ? y[n] + acc : acc);
    }
  }
}

void rms_norm(const RmsNormArgs& a) {
  check_args(a);
  for (int64_t r = 0; r < a.x.rows; ++r) {
    const float* x = a.x.row(r);
    float* y = a.y.row(r);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) sum_sq += static_cast<double>(x[c]) * x[c];
    const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(a.x.cols) + a.eps);
    for (int64_t c = 0; c < a.x.cols; ++c) {
      const double w = a.weight.empty() ? 1.0 : a.weight[static_cast<size_t>(c)];
      y[c] = static_cast<float>(x[c] * inv * w);
    }
  }
}

void layer_norm(const LayerNormArgs& a) {
  check_args(a);
  const auto n = static_cast<double>(a.x.cols);
  for (int64_t r = 0; r < a.x.rows; ++r) {
    const float* x = a.x.row(r);
    float* y = a.y.row(r);
    double mean = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) mean += x[c];
    mean /= n;
    double var = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) var += (x[c] - mean) * (x[c] - mean);
    const double inv = 1.0 / std::sqrt(var / n + a.eps);
    for (int64_t c = 0; c < a.x.cols; ++c) {
      const auto i = static_cast<size_t>(c);
      const double w = a.weight.empty() ? 1.0 : a.weight[i];
      const double b = a.bias.empty() ? 0.0 : a.bias[i];
      y[c] = static_cast<float>((x[c] - mean) * inv * w + b);
    }
  }
}

void softmax(const SoftmaxArgs& a) {
  for (int64_t r = 0; r < a.x.rows; ++r) {
    float* x = a.x.row(r);
    double m = -INFINITY;
    for (int64_t c = 0; c < a.x.cols; ++c) m = std::max(m, static_cast<double>(x[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) sum += std::exp(x[c] - m);
    for (int64_t c = 0; c < a.x.cols; ++c) x[c] = static_cast<float>(std::exp(x[c] - m) / sum);
  }
}

namespace {
template <typename F>
void unary(ConstMatrix x, Matrix y, const char* op, F f) {
  check_same_shape(x, y, op);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.row(r);
    float* yr = y.row(r);
    for (int64_t c = 0; c < x.cols; ++c) yr[c] = static_cast<float>(f(static_cast<double>(xr[c])));
  }
}

template <typename F>
void binary(const BinaryArgs& a, F f) {
  check_args(a);
  for (int64_t r = 0; r < a.a.rows; ++r) {
    const float* ar = a.a.row(r);
    const float* br = a.b.row(a.b.rows == 1 ? 0 : r);
    float* out = a.out.row(r);
    for (int64_t c = 0; c < a.a.cols; ++c) {
      const double b = br[a.b.cols == 1 ? 0 : c];
      out[c] = static_cast<float>(f(static_cast<double>(ar[c]), b));
    }
  }
}
}  // namespace

void silu(const UnaryArgs& a) {
  unary(a.x, a.y, "silu", silu_of);
}
void sigmoid(const UnaryArgs& a) {
  unary(a.x, a.y, "sigmoid", sigmoid_of);
}
void softplus(const UnaryArgs& a) {
  // torch's threshold: above 20, log(1 + e^x) equals x in float32.
  unary(a.x, a.y, "softplus", softplus_of);
}
void tanh(const UnaryArgs& a) {
  unary(a.x, a.y, "tanh", [](double z) { return std::tanh(z); });
}
void gelu(const UnaryArgs& a) {
  if (a.gelu == GeluApprox::kErf) {
    unary(a.x, a.y, "gelu", [](double z) { return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))); });
  } else {
    unary(a.x, a.y, "gelu", [](double z) {
      const double k = std::sqrt(2.0 / 3.14159265358979323846);
      return 0.5 * z * (1.0 + std::tanh(k * (z + 0.044715 * z * z * z)));
    });
  }
}

void swiglu(const SwigluArgs& a) {
  check_args(a);
  for (int64_t t = 0; t < a.out.rows; ++t) {
    for (int64_t c = 0; c < a.out.cols; ++c) {
      const double g = a.interleaved ? a.gate.row(t)[2 * c] : a.gate.row(t)[c];
      const double u = a.interleaved ? a.gate.row(t)[2 * c + 1] : a.up.row(t)[c];
      a.out.row(t)[c] = static_cast<float>(silu_of(g) * u);
    }
  }
}

void swiglu_clamped(const SwigluArgs& a) {
  check_args(a);
  for (int64_t t = 0; t < a.out.rows; ++t) {
    for (int64_t c = 0; c < a.out.cols; ++c) {
      const double g = a.interleaved ? a.gate.row(t)[2 * c] : a.gate.row(t)[c];
      const double u = a.interleaved ? a.gate.row(t)[2 * c + 1] : a.up.row(t)[c];
      a.out.row(t)[c] = static_cast<float>(clamped_swiglu_of(g, u, a.limit, a.alpha, a.up_shift));
    }
  }
}

void add(const BinaryArgs& a) {
  binary(a, [](double x, double y) { return x + y; });
}
void mul(const BinaryArgs& a) {
  binary(a, [](double x, double y) { return x * y; });
}

void clamp(const PointwiseArgs& a) {
  unary(a.x, a.y, "clamp", [&](double z) { return std::min(std::max(z, double{a.lo}), double{a.hi}); });
}
void scale(const PointwiseArgs& a) {
  unary(a.x, a.y, "scale", [&](double z) { return z * a.scale + a.shift; });
}
void rsqrt(const PointwiseArgs& a) {
  unary(a.x, a.y, "rsqrt", [&](double z) { return 1.0 / std::sqrt(z + a.eps); });
}
void row_mean(const PointwiseArgs& a) {
  check_same_shape(a.x.col_slice(0, 0), a.y.col_slice(0, 0), "row_mean");
  D0_CHECK_MSG(a.y.cols == 1 && a.x.cols > 0, "row_mean: y must be [R, 1] and x non-empty");
  for (int64_t r = 0; r < a.x.rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) sum += a.x.row(r)[c];
    a.y.row(r)[0] = static_cast<float>(sum / static_cast<double>(a.x.cols));
  }
}

void gather_rows(const GatherRowsArgs& a) {
  check_args(a);
  for (size_t i = 0; i < a.idx.size(); ++i) {
    const float* src = a.x.row(a.idx[i]);
    float* dst = a.y.row(static_cast<int64_t>(i));
    for (int64_t c = 0; c < a.x.cols; ++c) dst[c] = src[c];
  }
}

// One element at a time through the scalar conversion every format reader uses (NaN stays NaN).
void round_bf16(const PointwiseArgs& a) {
  check_same_shape(a.x, a.y, "round_bf16");
  for (int64_t r = 0; r < a.x.rows; ++r) {
    for (int64_t c = 0; c < a.x.cols; ++c) a.y.row(r)[c] = bf16_to_f32(f32_to_bf16(a.x.row(r)[c]));
  }
}

void copy_columns(const CopyColumnsArgs& a) {
  check_args(a);
  for (int64_t r = 0; r < a.x.rows; ++r) {
    for (int64_t g = 0; g < a.groups; ++g) {
      for (int64_t j = 0; j < a.width; ++j)
        a.y.row(r)[a.y_col0 + g * a.y_stride + j] = a.x.row(r)[a.x_col0 + g * a.x_stride + j];
    }
  }
}

void scatter_add(const ScatterAddArgs& a) {
  check_args(a);
  for (size_t i = 0; i < a.idx.size(); ++i) {
    const double w = a.weight.empty() ? 1.0 : a.weight[i];
    const float* src = a.x.row(static_cast<int64_t>(i));
    float* dst = a.y.row(a.idx[i]);
    for (int64_t c = 0; c < a.y.cols; ++c) dst[c] = static_cast<float>(dst[c] + w * src[c]);
  }
}

}  // namespace day0::ref
