// cpu Mamba-2 scan, float32. (sequence, head) pairs run in parallel, each pair's tokens in order over its
// own [head_dim, state_size] state; a state row is decayed, updated and read against c through the SIMD
// table (scale, axpy, dot), so the level chosen at run time sets the inner loops.
#include <cmath>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

void ssm_scan(const Context& c, const SsmScanArgs& a) {
  check_args(a);
  const int64_t nh = a.n_heads, p = a.head_dim, n = a.state_size, per_group = nh / a.n_groups;
  const auto n_seqs = static_cast<int64_t>(a.seqs.size());
  c.pool.parallel_for(n_seqs * nh, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const DeltaSequence& s = a.seqs[static_cast<size_t>(item / nh)];
      const int64_t h = item % nh, g = h / per_group;
      const float neg_a = std::exp(a.a_log[static_cast<size_t>(h)]);
      const float skip = a.d.empty() ? 0.0f : a.d[static_cast<size_t>(h)];
      float* st = s.state + h * p * n;  // [head_dim, state_size]
      for (int64_t t = s.row0; t < s.row0 + s.rows; ++t) {
        const float dt = a.dt.row(t)[h];
        const float decay = std::exp(-neg_a * dt);
        const float* x = a.x.row(t) + h * p;
        const float* b = a.b.row(t) + g * n;
        const float* cv = a.c.row(t) + g * n;
        float* y = a.y.row(t) + h * p;
        for (int64_t i = 0; i < p; ++i) {
          float* row = st + i * n;
          c.k.scale(decay, row, n);
          c.k.axpy(dt * x[i], b, row, n);
          y[i] = c.k.dot(row, cv, n) + skip * x[i];
        }
      }
    }
  });
}

}  // namespace day0::cpu
