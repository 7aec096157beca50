#pragma once
// Where the routed experts of a MoE layer live under expert parallelism: one rule for the binder, the
// engine and the planner.
//
// Rule: contiguous balanced blocks. EP rank r of `ep` holds experts
//   [floor(r * E / ep), floor((r + 1) * E / ep))
// so every rank holds floor(E / ep) or ceil(E / ep) experts (E need not divide by ep: 60 experts over
// 8 ranks are blocks of 7 and 8), neighbouring experts stay on one rank, and expert e lives
// on rank floor(((e + 1) * ep - 1) / E). Fewer experts than ranks would leave ranks idle: refused by the
// callers (check_expert_parallel).
//
// Redundant experts (EPLB): N extra physical copies per MoE layer (place_layer_experts below). Every
// rank keeps its block and takes replicas of other ranks' experts; dispatch_picks says which copy
// computes each (token, expert) pick.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/core/status.h"

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

// ---- Redundant experts ------------------------------------------------------------------------------

// One MoE layer's physical experts over the EP ranks.
struct LayerExpertPlacement {
  // [ep][slots]: the logical experts each rank holds: its block in order, then its replicas in the
  // order they were placed. No rank holds one expert twice.
  std::vector<std::vector<int32_t>> held;
  // [n_experts][copies]: the ranks holding each expert: its block's rank first, then the replicas'
  // ranks in the order they were placed. Every expert has at least one.
  std::vector<std::vector<int32_t>> holders;
  int64_t n_experts() const { return static_cast<int64_t>(holders.size()); }
  int ep() const { return static_cast<int>(held.size()); }
  bool replicated() const;  // whether any expert has more than one copy
};

// The even spread of `redundant` copies: one at a time to the rank with the fewest physical experts so
// far (the lowest rank among equals), so that slot counts are within one of each other where the blocks
// allow. It sizes max_slots_per_rank; it depends on the counts only, never on the load, so the memory a
// rank needs is known before any load is.
std::vector<int64_t> replicas_per_rank(int64_t n_experts, int64_t ep, int64_t redundant);
// The most physical experts one rank holds (its block plus its replicas): what the most loaded rank's
// memory is sized by. max_experts_per_rank(n, ep) when redundant is 0.
int64_t max_slots_per_rank(int64_t n_experts, int64_t ep, int64_t redundant);

// Whether `redundant` copies can be placed over `ep` ranks of `n_experts`: InvalidArgument when
// negative, without expert parallelism, or more than n_experts * (ep - 1) (some rank would then hold
// one expert twice).
Status check_redundant_experts(int64_t n_experts, int64_t ep, int64_t redundant);

// The placement of one layer's `n_experts` + `redundant` physical experts over `ep` ranks
// (check_redundant_experts must pass). `load` [n_experts] is how many tokens each expert took (a
// recorded run, expert_load.h); empty: every expert weighs the same. Greedy, as EPLB (the expert-parallel
// load balancer) replicates: each copy goes to the expert whose load per copy is highest (the lower id among
// equals) that some rank with a free slot does not hold yet, on the rank among those with the least load so
// far (sum of load per copy of what it holds; then the lowest rank). A rank has free slots while it holds
// fewer than max_slots_per_rank: the copies may gather on the ranks that lack the hot experts, never
// past the memory the plan sized. Deterministic: every rank computes the same placement from the same
// inputs.
LayerExpertPlacement place_layer_experts(int64_t n_experts, int64_t ep, int64_t redundant,
                                         std::span<const double> load = {});

// Which rank computes each (token, expert) pick of a step: ids [T, k] row-major (the router's picks,
// the same on every rank) -> rank_of_pick [T, k]; -1 for ids past the routed experts (zero-computation
// experts, added apart). The i-th pick of expert e in the step (row-major order) goes to copy
// (i + rotation) mod copies(e) of holders[e]: within a step each copy takes its expert's picks in turn
// (counts differ by at most one), and `rotation` (the step's first position: the same on every rank)
// moves one-token decode steps from copy to copy as the sequence grows.
void dispatch_picks(const LayerExpertPlacement& p, std::span<const int32_t> ids, int64_t rotation,
                    std::span<int32_t> rank_of_pick);

}  // namespace day0::dist
