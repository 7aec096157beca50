#pragma once
// Serving under mpirun: rank 0 runs the HTTP server and the scheduler, every other rank (a follower)
// holds its shard of the weights and replays rank 0's engine steps, so that each collective inside
// Engine::forward meets its peers.
//  - Before each forward, rank 0 sends the step to every follower: which sequences (by id), the length
//    each had cached, the tokens it feeds, and whether only last rows are wanted.
//  - A follower keeps one KvCache per sequence id. It cuts each back to the sent length first (rank 0's
//    engine rolls a failed step back; a preempted sequence comes back from 0), then runs the same
//    forward and drops the logits.
//  - The sequences rank 0 let go of (finished, preempted, cancelled) are named in the next message.
//  - An idle rank 0 sends a keep-alive at least every `keepalive_seconds`, so that a follower's
//    receive deadline (the communicator's timeout) means "rank 0 is gone", not "no traffic".
//  - close() ends the followers' loop: they return and exit 0.
// Prefix caching is off while steps are mirrored: a follower would need rank 0's cached blocks.
// Threads: the mirror is used by the scheduler's engine thread only (the communicator's one user),
// close() after that thread ended.
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "day0/core/status.h"
#include "day0/dist/communicator.h"
#include "day0/runtime/engine.h"

namespace day0::serve {

class StepMirror {
 public:
  // `world`: every rank of the job (rank 0 is this one). `compute_groups`: the communicators the
  // engine's forward uses (TP, EP, stage, PP), for the communication idle ratio. Not owned.
  StepMirror(dist::Communicator& world, std::vector<dist::Communicator*> compute_groups,
             double keepalive_seconds = 1.0);

  // Sends the step rank 0 is about to run: batch[i] belongs to sequence ids[i].
  Status send_step(std::span<const uint64_t> ids, std::span<const SequenceStep> batch, bool last_only);
  // Sequence `id` holds no cache on rank 0 any more; the followers free theirs with the next message.
  void release(uint64_t id);
  // Sends a keep-alive (and pending releases) when nothing was sent for keepalive_seconds.
  Status keepalive();
  // Ends the followers' loop (once; later calls do nothing).
  Status close();
  // A communication failure: the job's communicators are unusable, so every rank ends (exit 1) with
  // `st` printed here.
  [[noreturn]] void fail(const Status& st);

  // Time rank 0 spent inside forward; with the compute groups' waits it gives the idle ratio: the
  // share of forward time this rank waited on communication.
  void add_forward_seconds(double seconds) { forward_seconds_ += seconds; }
  double idle_ratio() const;
  int world_size() const { return world_.size(); }

 private:
  Status send(std::vector<int64_t>& words);
  dist::Communicator& world_;
  std::vector<dist::Communicator*> groups_;
  std::chrono::duration<double> keepalive_;
  std::chrono::steady_clock::time_point last_sent_;
  std::vector<int64_t> released_;
  double forward_seconds_ = 0;
  bool closed_ = false;
};

// A follower's loop: reserves `kv_blocks` blocks of the engine's pool, then replays rank 0's steps until
// rank 0 closes (ok). A message that cannot arrive (rank 0 died or hangs: the communicator's deadline)
// or a communication failure inside a step is an error: the caller ends the job. A step that fails
// otherwise fails on rank 0 too (same inputs, same weights); it is reported on stderr and the loop
// goes on.
Status follow_steps(Engine& engine, dist::Communicator& world, int64_t kv_blocks);

}  // namespace day0::serve
