#pragma once
// Serving with attention data parallelism under mpirun (DP = EP): every EP rank runs its own HTTP
// server, scheduler and KV pool for its own requests, and its engine's forward meets the other ranks'
// in every MoE layer's collectives (EngineOptions::data_parallel_attention). So before each forward
// the ranks agree, with one all-gather over the EP group, on who has work:
//  - a rank about to run a step says so (before_forward);
//  - a rank whose scheduler has nothing to run says so every loop turn (idle); when another rank has
//    work, it runs a one-row filler step on a scratch cache, so that every collective meets;
//  - a rank leaves its loop only when every rank wants to (shutting down with nothing left): until
//    then it keeps answering; the first time a rank sees another leaving, on_peer_leaving runs (the
//    server stops admitting and shuts down too), so that one rank's SIGTERM ends the job.
// Threads: used by the scheduler's engine thread only (the group's one user).
#include <chrono>
#include <cstdint>
#include <functional>

#include "day0/core/status.h"
#include "day0/dist/communicator.h"
#include "day0/runtime/engine.h"

namespace day0::serve {

class DpLockstep {
 public:
  // `group`: the EP group (every rank of the job, in DP = EP). Neither is owned.
  DpLockstep(dist::Communicator& group, Engine& engine) : group_(group), engine_(engine) {}

  // Called once, on the engine thread, when another rank is seen leaving first.
  void on_peer_leaving(std::function<void()> f) { on_peer_leaving_ = std::move(f); }
  // Before a forward of real work on this rank, and after it (the time between is busy time).
  Status before_forward();
  void after_forward();
  // A loop turn without a forward here: true when every rank wants to leave (`leaving` on all).
  // Runs the filler step when some rank has work.
  Result<bool> idle(bool leaving);
  // A communication failure: every rank ends (exit 1) with `st` printed here.
  [[noreturn]] void fail(const Status& st);

  // The share of busy time (real and filler steps with their agreements) this rank waited in the EP
  // group's collectives: the communication idle ratio under DP-attention. Turns where no rank had
  // work are not busy time, and their waits are not counted.
  double idle_ratio() const;
  int64_t filler_steps() const { return filler_steps_; }
  int64_t ticks() const { return ticks_; }

 private:
  struct Agreement {
    bool any_work = false;
    bool any_leaving = false;
    bool all_leaving = true;
  };
  Result<Agreement> tick(bool work, bool leaving);

  dist::Communicator& group_;
  Engine& engine_;
  using Clock = std::chrono::steady_clock;
  std::function<void()> on_peer_leaving_;
  Clock::time_point busy_since_{};
  double busy_seconds_ = 0;
  double idle_turn_waits_ = 0;  // the group's wait inside turns where nobody had work
  bool told_ = false;           // on_peer_leaving ran, or this rank left first
  int64_t filler_steps_ = 0;
  int64_t ticks_ = 0;
};

}  // namespace day0::serve
