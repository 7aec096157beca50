#include "day0/backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "day0/backends/cpu/cpu_compressed_attention.h"
#include "day0/backends/cpu/cpu_hyper_connections.h"
#include "day0/backends/cpu/cpu_ops.h"
#include "day0/backends/cpu/machine_limits.h"
#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/graph/decompositions.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"

namespace day0 {

namespace {

// Rows per parallel chunk for row-wise ops: enough work to pay for a wake-up.
int64_t row_grain(int64_t cols) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::string name, int n_threads, SimdLevel level, bool bf16_dot, std::set<HiddenKernel> hidden)
      : name_(std::move(name)),
        pool_(n_threads),
        ctx_{cpu::kernels_for(level), pool_, &workspace_, bf16_dot},
        hidden_(std::move(hidden)) {}

  std::string_view name() const override { return name_; }
  ThreadPool* thread_pool() override { return &pool_; }
  SimdLevel simd_level() const { return ctx_.k.level; }

  bool supports(const OpKey& key) const override {
    if (find_op_schema(key.op) == nullptr) return false;
    for (const auto& h : hidden_) {
      if (h.op == key.op && (h.all_formats || h.format == key.weights)) return false;
    }
    return true;
  }

  void embedding(const EmbeddingArgs& a) override { cpu::embedding(ctx_, a); }
  void matmul(const MatmulArgs& a) override { cpu::matmul(ctx_, a); }
  // One matmul per group over views (what a fused kernel would do: each group is a GEMM of its own).
  void grouped_matmul(const GroupedMatmulArgs& a) override { decompose_grouped_matmul(*this, a); }
  ComputeUnit matmul_unit(WeightFormat weights, bool exact, int64_t rows) const override {
    return cpu::matmul_unit(ctx_, weights, exact, rows);
  }
  void attention(const AttentionArgs& a) override { cpu::attention(ctx_, a); }
  void mla_attention(const MlaArgs& a) override {
    if (a.form == MlaForm::kAbsorbed) {
      cpu::mla_absorbed(ctx_, a);
    } else {
      decompose_mla_attention(*this, a);  // expanded keys/values through the cpu matmul + attention
    }
  }
  void moe_experts(const MoeExpertsArgs& a) override { cpu::moe_experts(ctx_, a); }
  void paged_attention(const PagedAttentionArgs& a) override { cpu::paged_attention(ctx_, a); }
  void paged_mla_attention(const PagedMlaArgs& a) override {
    if (a.form == MlaForm::kAbsorbed) {
      cpu::paged_mla_absorbed(ctx_, a);
    } else {
      decompose_paged_mla_attention(*this, a);
    }
  }
  void indexer_topk(const IndexerTopkArgs& a) override { cpu::indexer_topk(ctx_, a); }
  void block_indexer_topk(const BlockIndexerTopkArgs& a) override { cpu::block_indexer_topk(ctx_, a); }
  void causal_conv1d(const CausalConv1dArgs& a) override { cpu::causal_conv1d(ctx_, a); }
  void gated_delta_rule(const GatedDeltaRuleArgs& a) override { cpu::gated_delta_rule(ctx_, a); }
  void ssm_scan(const SsmScanArgs& a) override { cpu::ssm_scan(ctx_, a); }
  void gated_rms_norm(const GatedRmsNormArgs& a) override { cpu::gated_rms_norm(ctx_, a); }
  void kv_compress(const KvCompressArgs& a) override { cpu::kv_compress(ctx_, a); }
  void hc_weights(const HcWeightsArgs& a) override { cpu::hc_weights(ctx_, a); }
  void hc_collapse(const HcCollapseArgs& a) override { cpu::hc_collapse(ctx_, a); }
  void hc_expand(const HcExpandArgs& a) override { cpu::hc_expand(ctx_, a); }

  void rms_norm(const RmsNormArgs& a) override {
    check_args(a);
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      const float* x = a.x.row(r);
      float* y = a.y.row(r);
      const float inv = 1.0f / std::sqrt(ctx_.k.dot(x, x, a.x.cols) / static_cast<float>(a.x.cols) + a.eps);
      for (int64_t c = 0; c < a.x.cols; ++c)
        y[c] = x[c] * inv * (a.weight.empty() ? 1.0f : a.weight[static_cast<size_t>(c)]);
    });
  }

  void layer_norm(const LayerNormArgs& a) override {
    check_args(a);
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      const float* x = a.x.row(r);
      float* y = a.y.row(r);
      double mean = 0.0;
      for (int64_t c = 0; c < a.x.cols; ++c) mean += x[c];
      mean /= static_cast<double>(a.x.cols);
      double var = 0.0;
      for (int64_t c = 0; c < a.x.cols; ++c) var += (x[c] - mean) * (x[c] - mean);
      const auto inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(a.x.cols) + a.eps));
      const auto m = static_cast<float>(mean);
      for (int64_t c = 0; c < a.x.cols; ++c) {
        const auto i = static_cast<size_t>(c);
        y[c] =
            (x[c] - m) * inv * (a.weight.empty() ? 1.0f : a.weight[i]) + (a.bias.empty() ? 0.0f : a.bias[i]);
      }
    });
  }

  void rope(const RopeArgs& a) override {
    check_args(a);
    const int64_t half = a.rotary_dim / 2;
    rows(a.x.rows, a.x.cols, [&](int64_t t) {
      // cos / sin of this row's angles; on the stack for every head size in use (no allocation).
      constexpr int64_t kStackHalf = 512;
      float stack_cs[2 * kStackHalf];
      std::vector<float> heap_cs(half > kStackHalf ? static_cast<size_t>(2 * half) : 0);
      float* cs = half > kStackHalf ? heap_cs.data() : stack_cs;
      const auto pos = static_cast<float>(a.positions[static_cast<size_t>(t)]);
      for (int64_t i = 0; i < half; ++i) {
        const float theta = pos * a.inv_freq[static_cast<size_t>(i)];
        cs[i] = std::cos(theta) * a.attention_factor;
        cs[half + i] = std::sin(theta) * a.attention_factor;
      }
      for (int64_t h = 0; h < a.n_heads; ++h) {
        float* x = a.x.row(t) + h * a.head_dim + a.rotary_col0;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = a.layout == RopeLayout::kHalfSplit ? i : 2 * i;
          const int64_t i1 = a.layout == RopeLayout::kHalfSplit ? i + half : 2 * i + 1;
          const float c = cs[i];
          const float s = cs[half + i];
          const float x0 = x[i0];
          const float x1 = x[i1];
          x[i0] = x0 * c - x1 * s;
          x[i1] = x1 * c + x0 * s;
        }
      }
    });
  }

  void softmax(const SoftmaxArgs& a) override {
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      float* x = a.x.row(r);
      if (a.x.cols == 0) return;
      const float m = *std::max_element(x, x + a.x.cols);
      const float sum = ctx_.k.exp_sum(x, a.x.cols, m);
      ctx_.k.scale(1.0f / sum, x, a.x.cols);
    });
  }

  void silu(const UnaryArgs& a) override {
    unary(a.x, a.y, "silu", [](float z) { return z / (1.0f + std::exp(-z)); });
  }
  void sigmoid(const UnaryArgs& a) override {
    unary(a.x, a.y, "sigmoid", [](float z) { return 1.0f / (1.0f + std::exp(-z)); });
  }
  void softplus(const UnaryArgs& a) override {
    unary(a.x, a.y, "softplus", [](float z) { return z > 20.0f ? z : std::log1p(std::exp(z)); });
  }
  void tanh(const UnaryArgs& a) override {
    unary(a.x, a.y, "tanh", [](float z) { return std::tanh(z); });
  }
  void gelu(const UnaryArgs& a) override {
    if (a.gelu == GeluApprox::kErf) {
      unary(a.x, a.y, "gelu", [](float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); });
    } else {
      unary(a.x, a.y, "gelu", [](float z) {
        return 0.5f * z * (1.0f + std::tanh(0.79788456080286536f * (z + 0.044715f * z * z * z)));
      });
    }
  }

  void swiglu(const SwigluArgs& a) override {
    check_args(a);
    if (ctx_.k.silu_mul != nullptr && !a.interleaved) {
      rows(a.out.rows, a.out.cols,
           [&](int64_t t) { ctx_.k.silu_mul(a.gate.row(t), a.up.row(t), a.out.cols, a.out.row(t)); });
      return;
    }
    glu(a, [](float g, float u) { return g / (1.0f + std::exp(-g)) * u; });
  }
  void swiglu_clamped(const SwigluArgs& a) override {
    check_args(a);
    glu(a, [&](float g, float u) {
      return static_cast<float>(ref::clamped_swiglu_of(g, u, a.limit, a.alpha, a.up_shift));
    });
  }

  void add(const BinaryArgs& a) override {
    binary(a, [](float x, float y) { return x + y; });
  }
  void mul(const BinaryArgs& a) override {
    binary(a, [](float x, float y) { return x * y; });
  }

  // Cold ops: per token, a few hundred elements; the oracle's code is fast enough and keeps every
  // backend's routing and sampling bit-identical.
  void moe_router(const MoeRouterArgs& a) override { ref::moe_router(a); }
  void sample(const SampleArgs& a) override { ref::sample(a); }
  // Rows in parallel, each converted by one tight loop (BF16 vectorises) or copied (F32).
  void kv_write(const KvWriteArgs& a) override {
    check_args(a);
    const KvBlockTable& p = a.pool;
    const int64_t elem = kv_dtype_bytes(p.dtype);
    auto slot_row = [&](void* const* blocks, int64_t width, int64_t slot) {
      return static_cast<unsigned char*>(blocks[slot / p.block_tokens]) +
             (slot % p.block_tokens) * width * elem;
    };
    pool_.parallel_for(static_cast<int64_t>(a.slots.size()), row_grain(p.first_width + p.second_width),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t r = begin; r < end; ++r) {
                           const int64_t slot = a.slots[static_cast<size_t>(r)];
                           kv_row_from_f32(p.dtype, a.first.row(r), p.first_width,
                                           slot_row(p.first_blocks, p.first_width, slot));
                           kv_row_from_f32(p.dtype, a.second.row(r), p.second_width,
                                           slot_row(p.second_blocks, p.second_width, slot));
                         }
                       });
  }
  // In order (a later copy may read an earlier one's destination): one memcpy per tensor and block.
  void kv_copy_blocks(const KvCopyBlocksArgs& a) override {
    check_args(a);
    const int64_t elem = kv_dtype_bytes(a.pool.dtype);
    for (size_t i = 0; i < a.src.size(); ++i) {
      std::memcpy(a.pool.first_blocks[a.dst[i]], a.pool.first_blocks[a.src[i]],
                  static_cast<size_t>(a.rows[i] * a.pool.first_width * elem));
      std::memcpy(a.pool.second_blocks[a.dst[i]], a.pool.second_blocks[a.src[i]],
                  static_cast<size_t>(a.rows[i] * a.pool.second_width * elem));
    }
  }
  // max_element's index (the first largest), rows in parallel. A row without NaN takes two passes that
  // vectorise (the largest value in eight running maxima, then its first position); a row with a NaN
  // keeps max_element's own answer.
  void argmax(const ArgmaxArgs& a) override {
    check_args(a);
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      const float* x = a.x.row(r);
      const int64_t n = a.x.cols;
      float part[8];
      bool nan = false;
      for (int u = 0; u < 8; ++u) part[u] = x[0];
      int64_t c = 0;
      for (; c + 8 <= n; c += 8) {
        for (int u = 0; u < 8; ++u) {
          const float v = x[c + u];
          nan |= v != v;
          part[u] = v > part[u] ? v : part[u];
        }
      }
      for (; c < n; ++c) {
        nan |= x[c] != x[c];
        part[0] = x[c] > part[0] ? x[c] : part[0];
      }
      int64_t at = 0;
      if (nan) {
        at = std::max_element(x, x + n) - x;
      } else {
        float best = part[0];
        for (int u = 1; u < 8; ++u) best = part[u] > best ? part[u] : best;
        while (x[at] != best) ++at;  // best is one of the row's values
      }
      a.out[static_cast<size_t>(r)] = static_cast<int32_t>(at);
    });
  }

  void clamp(const PointwiseArgs& a) override {
    unary(a.x, a.y, "clamp", [&](float z) { return std::min(std::max(z, a.lo), a.hi); });
  }
  void scale(const PointwiseArgs& a) override {
    unary(a.x, a.y, "scale", [&](float z) { return z * a.scale + a.shift; });
  }
  void rsqrt(const PointwiseArgs& a) override {
    unary(a.x, a.y, "rsqrt", [&](float z) { return 1.0f / std::sqrt(z + a.eps); });
  }
  // The oracle's double sums, rows in parallel and eight partial sums a row (they vectorise): the same
  // float mean to within the last bit (every layer's finiteness record and the logits' mean per step).
  void row_mean(const PointwiseArgs& a) override {
    check_same_shape(a.x.col_slice(0, 0), a.y.col_slice(0, 0), "row_mean");
    D0_CHECK_MSG(a.y.cols == 1 && a.x.cols > 0, "row_mean: y must be [R, 1] and x non-empty");
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      const float* x = a.x.row(r);
      const int64_t n = a.x.cols;
      double part[8] = {};
      int64_t c = 0;
      for (; c + 8 <= n; c += 8) {
        for (int u = 0; u < 8; ++u) part[u] += static_cast<double>(x[c + u]);
      }
      for (; c < n; ++c) part[0] += static_cast<double>(x[c]);
      const double sum =
          ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      a.y.row(r)[0] = static_cast<float>(sum / static_cast<double>(n));
    });
  }
  // The same scalar conversion as the oracle, rows in parallel (the loop vectorises).
  // Through the level's to_bf16 (vcvtneps2bf16 on AVX-512 BF16) in L1-sized pieces, then widened back:
  // every activation of a BF16 model passes here several times a layer.
  void round_bf16(const PointwiseArgs& a) override {
    check_same_shape(a.x, a.y, "round_bf16");
    rows(a.x.rows, a.x.cols, [&](int64_t r) {
      const float* xr = a.x.row(r);
      float* yr = a.y.row(r);
      if (ctx_.k.round_bf16 != nullptr) return ctx_.k.round_bf16(xr, a.x.cols, yr);
      constexpr int64_t kPiece = 512;
      uint16_t half[kPiece];
      // Rounded by the level's to_bf16 and widened back by its dequant_row (a one-row BF16 matrix).
      WeightView piece;
      piece.format = WeightFormat::kBF16;
      piece.rows = 1;
      piece.data = half;
      for (int64_t c0 = 0; c0 < a.x.cols; c0 += kPiece) {
        const int64_t n = std::min(kPiece, a.x.cols - c0);
        ctx_.k.to_bf16(xr + c0, n, half);
        piece.cols = n;
        ctx_.k.dequant_row(piece, 0, 0, n, yr + c0);
      }
    });
  }
  void copy_columns(const CopyColumnsArgs& a) override {
    check_args(a);
    const auto bytes = static_cast<size_t>(a.width) * sizeof(float);
    rows(a.x.rows, a.groups * a.width, [&](int64_t r) {
      const float* x = a.x.row(r) + a.x_col0;
      float* y = a.y.row(r) + a.y_col0;
      for (int64_t g = 0; g < a.groups; ++g) std::memcpy(y + g * a.y_stride, x + g * a.x_stride, bytes);
    });
  }
  void gather_rows(const GatherRowsArgs& a) override { ref::gather_rows(a); }
  void scatter_add(const ScatterAddArgs& a) override {
    check_args(a);
    for (size_t i = 0; i < a.idx.size(); ++i) {
      ctx_.k.axpy(a.weight.empty() ? 1.0f : a.weight[i], a.x.row(static_cast<int64_t>(i)), a.y.row(a.idx[i]),
                  a.y.cols);
    }
  }

 private:
  template <typename F>
  void rows(int64_t n_rows, int64_t cols, F per_row) {
    pool_.parallel_for(n_rows, row_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) per_row(r);
    });
  }

  template <typename F>
  void unary(ConstMatrix x, Matrix y, const char* op, F f) {
    check_same_shape(x, y, op);
    rows(x.rows, x.cols, [&](int64_t r) {
      const float* xr = x.row(r);
      float* yr = y.row(r);
      for (int64_t c = 0; c < x.cols; ++c) yr[c] = f(xr[c]);
    });
  }

  template <typename F>
  void binary(const BinaryArgs& a, F f) {
    check_args(a);
    rows(a.a.rows, a.a.cols, [&](int64_t r) {
      const float* ar = a.a.row(r);
      const float* br = a.b.row(a.b.rows == 1 ? 0 : r);
      float* out = a.out.row(r);
      if (a.b.cols == 1) {
        const float b = br[0];
        for (int64_t c = 0; c < a.a.cols; ++c) out[c] = f(ar[c], b);
      } else {
        for (int64_t c = 0; c < a.a.cols; ++c) out[c] = f(ar[c], br[c]);
      }
    });
  }

  template <typename F>
  void glu(const SwigluArgs& a, F f) {
    rows(a.out.rows, a.out.cols, [&](int64_t t) {
      const float* g = a.gate.row(t);
      const float* u = a.interleaved ? g + 1 : a.up.row(t);
      const int64_t step = a.interleaved ? 2 : 1;
      float* out = a.out.row(t);
      for (int64_t c = 0; c < a.out.cols; ++c) out[c] = f(g[c * step], u[c * step]);
    });
  }

  std::string name_;
  ThreadPool pool_;
  cpu::Workspace workspace_;
  cpu::Context ctx_;
  std::set<HiddenKernel> hidden_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options, std::string name,
                                                  std::set<HiddenKernel> hidden) {
  SimdLevel level;
  if (options.simd) {
    level = *options.simd;
    if (static_cast<int>(level) > static_cast<int>(detected_simd_level())) {
      return invalid_argument(fmt::format("SIMD level {}: this CPU supports at most {}",
                                          simd_level_name(level), simd_level_name(detected_simd_level())));
    }
  } else {
    D0_ASSIGN_OR_RETURN(level, default_simd_level());
  }
  bool bf16_dot = false;
  if (options.bf16_dot_gemm) {
    bf16_dot = *options.bf16_dot_gemm;
  } else if (const char* env = std::getenv("DAY0_BF16_GEMM"); env != nullptr && *env != '\0') {
    const std::string_view v(env);
    if (v != "dot" && v != "fma")
      return invalid_argument(fmt::format("DAY0_BF16_GEMM: expected dot or fma, found '{}'", v));
    bf16_dot = v == "dot";
  } else {
    bf16_dot = bf16_dot_outruns_fma();
  }
  const int threads = options.n_threads > 0 ? options.n_threads : default_thread_count();
  return std::unique_ptr<Backend>(
      std::make_unique<CpuBackend>(std::move(name), threads, level, bf16_dot, std::move(hidden)));
}

std::set<HiddenKernel> partial_backend_hidden_kernels() {
  std::set<HiddenKernel> hidden;
  for (std::string_view op :
       {op::kRmsNorm, op::kSwiglu, op::kSwigluClamped, op::kMoeExperts, op::kMlaAttention, op::kMoeRouter,
        op::kSample, op::kGatedRmsNorm, op::kHcCollapse, op::kHcExpand}) {
    hidden.insert({std::string(op)});
  }
  hidden.insert({std::string(op::kMatmul), false, WeightFormat::kMxfp4});
  hidden.insert({std::string(op::kEmbedding), false, WeightFormat::kMxfp4});
  return hidden;
}

}  // namespace day0
