// Reference Mamba-2 scan: the selective state-space recurrence token by token over the per-sequence
// float32 state. Plain loops, double within a token; the state is float32 between tokens, as the
// contract (ops/kernel_args.h) stores it.
#include <cmath>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/ops/kernel_checks.h"

namespace day0::ref {

void ssm_scan(const SsmScanArgs& a) {
  check_args(a);
  const int64_t nh = a.n_heads, p = a.head_dim, n = a.state_size, per_group = nh / a.n_groups;
  for (const DeltaSequence& s : a.seqs) {
    for (int64_t t = s.row0; t < s.row0 + s.rows; ++t) {
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / per_group;
        const double dt = a.dt.row(t)[h];
        const double decay = std::exp(-std::exp(static_cast<double>(a.a_log[static_cast<size_t>(h)])) * dt);
        const double skip = a.d.empty() ? 0.0 : a.d[static_cast<size_t>(h)];
        const float* x = a.x.row(t) + h * p;
        const float* b = a.b.row(t) + g * n;
        const float* c = a.c.row(t) + g * n;
        float* st = s.state + h * p * n;  // [head_dim, state_size]
        float* y = a.y.row(t) + h * p;
        for (int64_t i = 0; i < p; ++i) {
          double acc = 0.0;
          for (int64_t j = 0; j < n; ++j) {
            const double updated = decay * st[i * n + j] + dt * x[i] * b[j];
            st[i * n + j] = static_cast<float>(updated);
            acc += updated * c[j];
          }
          y[i] = static_cast<float>(acc + skip * x[i]);
        }
      }
    }
  }
}

}  // namespace day0::ref
