#include "day0/align/greedy_check.h"

#include <algorithm>

#include "day0/core/error.h"

namespace day0 {

int64_t rank_of(std::span<const float> logits, int64_t token) {
  D0_CHECK(token >= 0 && token < static_cast<int64_t>(logits.size()));
  const float v = logits[static_cast<size_t>(token)];
  int64_t rank = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto idx = static_cast<int64_t>(i);
    if (logits[i] > v || (logits[i] == v && idx < token)) ++rank;
  }
  return rank;
}

GreedyCheck compare_greedy(std::span<const int64_t> ref_tokens, const FloatMatrix& ref_steps,
                           std::span<const int64_t> engine_tokens, const FloatMatrix& engine_steps,
                           int64_t top_n) {
  GreedyCheck g;
  g.compared = static_cast<int64_t>(std::min(ref_tokens.size(), engine_tokens.size()));
  for (int64_t s = 0; s < g.compared; ++s) {
    if (ref_tokens[s] == engine_tokens[s]) continue;
    g.first_divergence = s;
    g.ref_token = ref_tokens[s];
    g.engine_token = engine_tokens[s];
    D0_CHECK_MSG(s < ref_steps.rows && s < engine_steps.rows, "greedy check: a step without logits");
    g.engine_token_rank_in_ref = rank_of(ref_steps.row(s), g.engine_token);
    g.ref_token_rank_in_engine = rank_of(engine_steps.row(s), g.ref_token);
    g.pass = g.engine_token_rank_in_ref < top_n && g.ref_token_rank_in_engine < top_n;
    break;
  }
  return g;
}

}  // namespace day0
