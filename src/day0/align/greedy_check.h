#pragma once
// vLLM-style generation check: two greedy continuations of the same prompt are compared token by
// token; at the first divergence each side's token must lie in the other side's top-N (a near tie that
// flipped is fine, a token the other side considers unlikely is not).
#include <cstdint>
#include <span>
#include <vector>

#include "day0/align/float_matrix.h"

namespace day0 {

struct GreedyCheck {
  int64_t compared = 0;           // tokens compared (the shorter continuation)
  int64_t first_divergence = -1;  // step index, -1 when identical
  int64_t ref_token = -1;         // tokens at the divergence
  int64_t engine_token = -1;
  int64_t engine_token_rank_in_ref = -1;  // 0-based rank of the engine's token under the reference
  int64_t ref_token_rank_in_engine = -1;
  bool pass = true;  // identical, or both tokens within the other's top-N at the divergence
};

// ref_steps / engine_steps: logits [steps, vocab] from which each token was chosen (row s produced
// token s). Only the rows up to the divergence are read.
GreedyCheck compare_greedy(std::span<const int64_t> ref_tokens, const FloatMatrix& ref_steps,
                           std::span<const int64_t> engine_tokens, const FloatMatrix& engine_steps,
                           int64_t top_n);

// 0-based rank of `token` in `logits` (number of strictly larger values, ties broken by index).
int64_t rank_of(std::span<const float> logits, int64_t token);

}  // namespace day0
