#include "day0/serve/dp_lockstep.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include <fmt/format.h>

namespace day0::serve {

Result<DpLockstep::Agreement> DpLockstep::tick(bool work, bool leaving) {
  const int n = group_.size();
  const std::vector<int64_t> mine = {work ? 1 : 0, leaving ? 1 : 0};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));  // [ranks, (work, leaving)]
  const double waited_before = group_.stats().wait_seconds;
  D0_RETURN_IF_ERROR(group_.all_gather_of<int64_t>(mine, all));
  ++ticks_;
  Agreement a;
  for (int r = 0; r < n; ++r) {
    a.any_work = a.any_work || all[2 * static_cast<size_t>(r)] != 0;
    a.any_leaving = a.any_leaving || all[2 * static_cast<size_t>(r) + 1] != 0;
    a.all_leaving = a.all_leaving && all[2 * static_cast<size_t>(r) + 1] != 0;
  }
  if (!a.any_work) idle_turn_waits_ += group_.stats().wait_seconds - waited_before;
  if (leaving) told_ = true;
  if (a.any_leaving && !told_) {
    told_ = true;
    if (on_peer_leaving_) on_peer_leaving_();
  }
  return a;
}

Status DpLockstep::before_forward() {
  busy_since_ = Clock::now();
  return tick(true, false).status();
}

void DpLockstep::after_forward() {
  busy_seconds_ += std::chrono::duration<double>(Clock::now() - busy_since_).count();
}

double DpLockstep::idle_ratio() const {
  if (busy_seconds_ <= 0) return 0;
  const double waited = group_.stats().wait_seconds - idle_turn_waits_;
  return std::clamp(waited / busy_seconds_, 0.0, 1.0);
}

Result<bool> DpLockstep::idle(bool leaving) {
  const auto start = Clock::now();
  D0_ASSIGN_OR_RETURN(const Agreement a, tick(false, leaving));
  if (!a.any_work) return a.all_leaving;
  // Another rank runs a step: one row of token 0 at position 0 on a scratch cache meets its
  // collectives; the cache and its blocks are gone with it.
  KvCache scratch = engine_.new_cache();
  const std::vector<int32_t> token = {0};
  const SequenceStep step{&scratch, token};
  ++filler_steps_;
  const Status st = engine_.forward(std::span(&step, 1), true).status();
  busy_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  D0_RETURN_IF_ERROR(st);
  return false;
}

void DpLockstep::fail(const Status& st) {
  fmt::print(stderr, "serve: {} (attention data parallelism: the ranks' steps are out of reach)\n",
             st.to_string());
  std::fflush(stderr);
  dist::abort_world(1);
}

}  // namespace day0::serve
