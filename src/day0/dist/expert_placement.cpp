#include "day0/dist/expert_placement.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace day0::dist {

bool LayerExpertPlacement::replicated() const {
  return std::any_of(holders.begin(), holders.end(), [](const auto& h) { return h.size() > 1; });
}

std::vector<int64_t> replicas_per_rank(int64_t n_experts, int64_t ep, int64_t redundant) {
  // Water-filling, one copy at a time to the first rank with the fewest slots, in closed form (the plan
  // evaluates it for every layout; a loop over copies took seconds at 2^14). Blocks differ by at most
  // one expert: the smaller ones fill first, in rank order, then every rank takes a share of the rest
  // and the first `rest % ep` ranks one more.
  std::vector<int64_t> replicas(static_cast<size_t>(ep), 0);  // [ep]
  if (ep <= 0 || redundant <= 0) return replicas;
  int64_t smallest = expert_block(n_experts, ep, 0).size();
  for (int64_t r = 1; r < ep; ++r) smallest = std::min(smallest, expert_block(n_experts, ep, r).size());
  int64_t left = redundant;
  for (int64_t r = 0; r < ep && left > 0; ++r) {
    if (expert_block(n_experts, ep, r).size() == smallest) {
      ++replicas[static_cast<size_t>(r)];
      --left;
    }
  }
  const int64_t share = left / ep, extra = left % ep;
  for (int64_t r = 0; r < ep; ++r) replicas[static_cast<size_t>(r)] += share + (r < extra ? 1 : 0);
  return replicas;
}

int64_t max_slots_per_rank(int64_t n_experts, int64_t ep, int64_t redundant) {
  const std::vector<int64_t> replicas = replicas_per_rank(n_experts, ep, redundant);
  int64_t most = 0;
  for (int64_t r = 0; r < ep; ++r)
    most = std::max(most, expert_block(n_experts, ep, r).size() + replicas[static_cast<size_t>(r)]);
  return most;
}

Status check_redundant_experts(int64_t n_experts, int64_t ep, int64_t redundant) {
  if (redundant < 0)
    return invalid_argument(fmt::format("--redundant-experts {}: must be 0 or more", redundant));
  if (redundant > 0 && ep < 2) {
    return invalid_argument(
        fmt::format("--redundant-experts {}: copies are spread over expert-parallel ranks: it needs --ep 2 "
                    "or more",
                    redundant));
  }
  if (redundant > n_experts * (ep - 1)) {
    return invalid_argument(
        fmt::format("--redundant-experts {}: {} experts over EP {} take at most {} copies (each expert once "
                    "on every rank); more would put two copies of one expert on a rank",
                    redundant, n_experts, ep, n_experts * (ep - 1)));
  }
  return Status::ok();
}

LayerExpertPlacement place_layer_experts(int64_t n_experts, int64_t ep, int64_t redundant,
                                         std::span<const double> load) {
  LayerExpertPlacement p;
  p.held.resize(static_cast<size_t>(ep));
  p.holders.resize(static_cast<size_t>(n_experts));
  std::vector<std::vector<char>> holds(static_cast<size_t>(ep),
                                       std::vector<char>(static_cast<size_t>(n_experts), 0));
  for (int64_t r = 0; r < ep; ++r) {
    const ExpertBlock b = expert_block(n_experts, ep, r);
    for (int64_t e = b.begin; e < b.end; ++e) {
      p.held[static_cast<size_t>(r)].push_back(static_cast<int32_t>(e));
      p.holders[static_cast<size_t>(e)].push_back(static_cast<int32_t>(r));
      holds[static_cast<size_t>(r)][static_cast<size_t>(e)] = 1;
    }
  }
  if (redundant <= 0) return p;
  auto load_of = [&](int64_t e) { return load.empty() ? 1.0 : load[static_cast<size_t>(e)]; };
  auto per_copy = [&](int64_t e) {
    return load_of(e) / static_cast<double>(p.holders[static_cast<size_t>(e)].size());
  };
  // Any rank may take copies up to the most loaded rank's slot count (what memory is sized by), so that
  // a hot expert's copy is not kept off a rank just because the even spread gave it no replica.
  const int64_t most = max_slots_per_rank(n_experts, ep, redundant);
  std::vector<int64_t> free_slots(static_cast<size_t>(ep));  // [ep]
  for (int64_t r = 0; r < ep; ++r)
    free_slots[static_cast<size_t>(r)] = most - expert_block(n_experts, ep, r).size();
  std::vector<double> rank_load(static_cast<size_t>(ep), 0.0);  // [ep]
  for (int64_t e = 0; e < n_experts; ++e)
    rank_load[static_cast<size_t>(expert_owner(n_experts, ep, e))] += load_of(e);
  std::vector<int64_t> order(static_cast<size_t>(n_experts));  // experts by load per copy, descending
  for (int64_t copy = 0; copy < redundant; ++copy) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return per_copy(a) > per_copy(b); });
    int64_t chosen = -1, to = -1;
    for (int64_t e : order) {
      for (int64_t r = 0; r < ep; ++r) {
        const auto ri = static_cast<size_t>(r);
        if (free_slots[ri] == 0 || holds[ri][static_cast<size_t>(e)]) continue;
        if (to < 0 || rank_load[ri] < rank_load[static_cast<size_t>(to)]) to = r;
      }
      if (to >= 0) {
        chosen = e;
        break;
      }
    }
    // check_redundant_experts guarantees a rank with a free slot lacks some expert (it holds fewer
    // than n_experts); nothing left to place otherwise.
    if (chosen < 0) break;
    const auto ei = static_cast<size_t>(chosen);
    const double before = per_copy(chosen);
    p.holders[ei].push_back(static_cast<int32_t>(to));
    const double after = per_copy(chosen);
    for (int32_t h : p.holders[ei]) rank_load[static_cast<size_t>(h)] += after - (h == to ? 0.0 : before);
    p.held[static_cast<size_t>(to)].push_back(static_cast<int32_t>(chosen));
    holds[static_cast<size_t>(to)][ei] = 1;
    --free_slots[static_cast<size_t>(to)];
  }
  return p;
}

void dispatch_picks(const LayerExpertPlacement& p, std::span<const int32_t> ids, int64_t rotation,
                    std::span<int32_t> rank_of_pick) {
  const int64_t n_experts = p.n_experts();
  std::vector<int64_t> seen(static_cast<size_t>(n_experts), 0);  // [n_experts] picks so far this step
  const int64_t start = std::max<int64_t>(rotation, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t e = ids[i];
    if (e < 0 || e >= n_experts) {
      rank_of_pick[i] = -1;
      continue;
    }
    const std::vector<int32_t>& copies = p.holders[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(copies.size());
    rank_of_pick[i] = copies[static_cast<size_t>((seen[static_cast<size_t>(e)]++ + start) % n)];
  }
}

}  // namespace day0::dist
