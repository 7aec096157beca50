#include "day0/ops/int8_activations.h"

#include <algorithm>
#include <cmath>

namespace day0 {

void quantize_activation_row(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum) {
  const int64_t blocks = (n + kIntBlock - 1) / kIntBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * kIntBlock;
    const int64_t k1 = std::min(n, k0 + kIntBlock);
    float amax = 0.0f;
    bool finite = true;
    for (int64_t k = k0; k < k1; ++k) {
      finite = finite && std::isfinite(x[k]);
      amax = std::max(amax, std::fabs(x[k]));
    }
    int8_t* qb = q + k0;
    std::fill(qb, qb + kIntBlock, int8_t{0});
    sum[b] = 0;
    if (!finite) {
      scale[b] = NAN;
      continue;
    }
    if (amax == 0.0f) {
      scale[b] = 0.0f;
      continue;
    }
    scale[b] = amax / 127.0f;
    const float inv = 127.0f / amax;
    int32_t s = 0;
    for (int64_t k = k0; k < k1; ++k) {
      const float r = std::nearbyint(x[k] * inv);  // round half to even (default rounding mode)
      const auto v = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
      qb[k - k0] = v;
      s += v;
    }
    sum[b] = s;
  }
}

void size_activations(int64_t rows, int64_t cols, Int8Rows& out) {
  out.rows = rows;
  out.cols = cols;
  out.blocks = (cols + kIntBlock - 1) / kIntBlock;
  const auto codes = static_cast<size_t>(out.rows * out.blocks * kIntBlock);
  const auto blocks = static_cast<size_t>(out.rows * out.blocks);
  if (out.q.size() < codes) out.q.resize(codes);
  if (out.scale.size() < blocks) out.scale.resize(blocks);
  if (out.sum.size() < blocks) out.sum.resize(blocks);
}

void quantize_activations(ConstMatrix x, Int8Rows& out) {
  size_activations(x.rows, x.cols, out);
  for (int64_t r = 0; r < x.rows; ++r) {
    quantize_activation_row(x.row(r), x.cols, out.q.data() + r * out.blocks * kIntBlock,
                            out.scale.data() + r * out.blocks, out.sum.data() + r * out.blocks);
  }
}

void activation_group_terms(const Int8Rows& a, int64_t r, int64_t group, int64_t groups, float* out) {
  const int64_t per_group = groups <= 1 ? a.blocks : group / kIntBlock;
  const float* s = a.scales(r);
  const int32_t* sum = a.sums(r);
  for (int64_t g = 0; g < groups; ++g) {
    float t = 0.0f;
    const int64_t b1 = std::min(a.blocks, (g + 1) * per_group);
    for (int64_t b = g * per_group; b < b1; ++b) t += s[b] * static_cast<float>(sum[b]);
    out[g] = t;
  }
}

}  // namespace day0
