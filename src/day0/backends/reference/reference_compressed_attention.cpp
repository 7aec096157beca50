// Reference kernel of compressed attention's gated pooling (kv_compress).
#include <cmath>
#include <vector>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/numeric.h"
#include "day0/ops/kernel_checks.h"

namespace day0::ref {

void kv_compress(const KvCompressArgs& a) {
  check_args(a);
  const int64_t m = a.ratio, d = a.out.cols;
  std::vector<double> kv, gate;  // one channel's slots
  for (int64_t w = 0; w < a.out.rows; ++w) {
    for (int64_t c = 0; c < d; ++c) {
      kv.clear();
      gate.clear();
      if (a.overlap && (w > 0 || a.prior_kv.rows > 0)) {  // the previous window's first halves
        for (int64_t i = 0; i < m; ++i) {
          if (w > 0) {
            kv.push_back(a.kv.row((w - 1) * m + i)[c]);
            gate.push_back(double{a.gate.row((w - 1) * m + i)[c]} + a.position_bias.row(i)[c]);
          } else {
            kv.push_back(a.prior_kv.row(i)[c]);
            gate.push_back(a.prior_gate.row(i)[c]);
          }
        }
      }
      const int64_t col = a.overlap ? d + c : c;  // this window's own half
      for (int64_t i = 0; i < m; ++i) {
        kv.push_back(a.kv.row(w * m + i)[col]);
        gate.push_back(double{a.gate.row(w * m + i)[col]} + a.position_bias.row(i)[col]);
      }
      double top = -INFINITY;
      for (double g : gate) top = std::max(top, g);
      double sum = 0.0, acc = 0.0;
      for (size_t s = 0; s < gate.size(); ++s) sum += std::exp(gate[s] - top);
      for (size_t s = 0; s < gate.size(); ++s) {
        const double weight = std::exp(gate[s] - top) / sum;
        acc +=
            a.bf16_steps
                ? double{round_to_bf16(round_to_bf16(static_cast<float>(weight)) * static_cast<float>(kv[s]))}
                : weight * kv[s];
      }
      a.out.row(w)[c] = a.bf16_steps ? round_to_bf16(static_cast<float>(acc)) : static_cast<float>(acc);
    }
  }
}

}  // namespace day0::ref
