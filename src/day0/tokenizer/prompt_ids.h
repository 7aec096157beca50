#pragma once
// Token-id prompts as the CLI takes them: "1,2,3" (one prompt) or "1,2;3,4,5" (several).
#include <cstdint>
#include <string_view>
#include <vector>

#include "day0/core/status.h"

namespace day0 {

// Every id must be an integer in [0, vocab) (vocab <= 0: only non-negative); no empty prompt.
Result<std::vector<std::vector<int64_t>>> parse_prompt_ids(std::string_view text, int64_t vocab);
// Deterministic pseudo-random prompts (for --against without a dump).
std::vector<std::vector<int64_t>> seeded_prompts(int64_t count, int64_t length, int64_t vocab, uint64_t seed);

}  // namespace day0
