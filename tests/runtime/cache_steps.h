#pragma once
// Steps of one sequence on a golden engine, for the tests of cache state that a fork, a cut back or a
// rollback must restore bit for bit (recurrent snapshots, compressed KV entries).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "day0/runtime/engine.h"
#include "golden.h"

namespace day0::testing::cache_steps {

// Float32 KV in blocks of `block_tokens`: the cut points are whole blocks and nothing rounds the rows.
inline EngineOptions exact_options(int64_t block_tokens) {
  EngineOptions o;
  o.kv_dtype = KvDtype::kF32;
  o.kv_block_tokens = block_tokens;
  return o;
}

// One step of `ids` on `cache`: the last row's logits [1, vocab], copied.
inline FloatMatrix step(Engine& e, KvCache& cache, std::span<const int32_t> ids) {
  const SequenceStep s{&cache, ids};
  auto logits = e.forward(std::span(&s, 1), true);
  if (!logits.is_ok()) throw std::runtime_error(logits.status().to_string());
  return copy_matrix(*logits);
}

// `n` token ids below `vocab`, a different run for each seed.
inline std::vector<int32_t> tokens(int n, int seed, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((seed * 31 + i * 17 + 3) % vocab);
  return t;
}

inline bool same_bits(const FloatMatrix& a, const FloatMatrix& b) {
  return a.rows == b.rows && a.cols == b.cols &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

inline double max_diff(const FloatMatrix& a, const FloatMatrix& b) {
  if (a.data.size() != b.data.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data[i]) - static_cast<double>(b.data[i])));
  return m;
}

}  // namespace day0::testing::cache_steps
