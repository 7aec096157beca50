#include "day0/backends/cpu/cpu_compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "day0/core/numeric.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

// Per window: the slots' running max, then exp-sums and weighted sums, channels innermost (contiguous
// rows of kv and gate).
void kv_compress(const Context& c, const KvCompressArgs& a) {
  check_args(a);
  const int64_t m = a.ratio, d = a.out.cols;
  c.pool.parallel_for(a.out.rows, 1, [&](int64_t w0, int64_t w1) {
    std::vector<float> top(static_cast<size_t>(d)), sum(top.size());  // [d] per channel
    for (int64_t w = w0; w < w1; ++w) {
      // Slot s: its kv and gate rows (bias added below unless it is the prior's), -1: none.
      const bool previous = a.overlap && (w > 0 || a.prior_kv.rows > 0);
      const auto slot = [&](int64_t s, const float*& kv, const float*& gate, const float*& bias) {
        if (s < m) {  // the previous window's first halves
          if (w > 0) {
            kv = a.kv.row((w - 1) * m + s), gate = a.gate.row((w - 1) * m + s), bias = a.position_bias.row(s);
          } else {
            kv = a.prior_kv.row(s), gate = a.prior_gate.row(s), bias = nullptr;
          }
          return;
        }
        const int64_t i = s - m, col = a.overlap ? d : 0;
        kv = a.kv.row(w * m + i) + col, gate = a.gate.row(w * m + i) + col,
        bias = a.position_bias.row(i) + col;
      };
      const int64_t first = previous ? 0 : m;
      float* out = a.out.row(w);
      std::fill(top.begin(), top.end(), -INFINITY);
      for (int64_t s = first; s < 2 * m; ++s) {
        const float *kv, *gate, *bias;
        slot(s, kv, gate, bias);
        for (int64_t ch = 0; ch < d; ++ch)
          top[static_cast<size_t>(ch)] =
              std::max(top[static_cast<size_t>(ch)], gate[ch] + (bias ? bias[ch] : 0.0f));
      }
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(out, out + d, 0.0f);
      for (int64_t s = first; s < 2 * m; ++s) {
        const float *kv, *gate, *bias;
        slot(s, kv, gate, bias);
        for (int64_t ch = 0; ch < d; ++ch) {
          const float e = std::exp(gate[ch] + (bias ? bias[ch] : 0.0f) - top[static_cast<size_t>(ch)]);
          sum[static_cast<size_t>(ch)] += e;
          out[ch] += e * kv[ch];
        }
      }
      if (!a.bf16_steps) {
        for (int64_t ch = 0; ch < d; ++ch) out[ch] /= sum[static_cast<size_t>(ch)];
        continue;
      }
      // A bfloat16 run: each weight and product rounded, then the sum (rare: a second pass is fine).
      std::fill(out, out + d, 0.0f);
      for (int64_t s = first; s < 2 * m; ++s) {
        const float *kv, *gate, *bias;
        slot(s, kv, gate, bias);
        for (int64_t ch = 0; ch < d; ++ch) {
          const float e = std::exp(gate[ch] + (bias ? bias[ch] : 0.0f) - top[static_cast<size_t>(ch)]);
          out[ch] += round_to_bf16(round_to_bf16(e / sum[static_cast<size_t>(ch)]) * kv[ch]);
        }
      }
      for (int64_t ch = 0; ch < d; ++ch) out[ch] = round_to_bf16(out[ch]);
    }
  });
}

}  // namespace day0::cpu
