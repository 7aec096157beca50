#pragma once
// Where the routed experts of a MoE layer live under expert parallelism: one rule for the binder, the
// engine and the planner.
//
// Rule: contiguous balanced blocks. EP rank r of `ep` holds experts
//   [floor(r * E / ep), floor((r + 1) * E / ep))
// so every rank holds floor(E / ep) or ceil(E / ep) experts (E need not divide by ep: Qwen2-MoE's 60
// experts over 8 ranks are blocks of 7 and 8), neighbouring experts stay on one rank, and expert e lives
// on rank floor(((e + 1) * ep - 1) / E). Fewer experts than ranks would leave ranks idle: refused by the
// callers (check_expert_parallel).
#include <cstdint>

namespace day0::dist {

struct ExpertBlock {
  int64_t begin = 0;  // first expert held
  int64_t end = 0;    // one past the last
  int64_t size() const { return end - begin; }
  bool contains(int64_t e) const { return e >= begin && e < end; }
  bool operator==(const ExpertBlock&) const = default;
};

// Part `i` of `n` items cut into `parts` contiguous blocks of floor or ceil(n / parts) items.
constexpr ExpertBlock balanced_block(int64_t n, int64_t parts, int64_t i) {
  return {i * n / parts, (i + 1) * n / parts};
}
// The largest of those blocks.
constexpr int64_t largest_block(int64_t n, int64_t parts) {
  return (n + parts - 1) / parts;
}

// The experts EP rank `rank` of `ep` holds, of `n_experts` (all of them when ep is 1).
constexpr ExpertBlock expert_block(int64_t n_experts, int64_t ep, int64_t rank) {
  return balanced_block(n_experts, ep, rank);
}

// The EP rank that holds expert `e`.
constexpr int64_t expert_owner(int64_t n_experts, int64_t ep, int64_t e) {
  return ((e + 1) * ep - 1) / n_experts;
}

// The most experts one rank holds: what the most loaded rank's memory is sized by.
constexpr int64_t max_experts_per_rank(int64_t n_experts, int64_t ep) {
  return largest_block(n_experts, ep);
}

}  // namespace day0::dist
