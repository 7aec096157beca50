#pragma once
// Serving under mpirun: rank 0 runs the HTTP server and the scheduler, every other rank (a follower)
// holds its shard of the weights and replays rank 0's engine steps, so that each collective inside
// Engine::forward meets its peers.
//  - Before each forward, rank 0 sends the step to every follower: which sequences (by id), the length
//    each had cached, the tokens it feeds, and whether only last rows are wanted.
//  - A follower keeps one KvCache per sequence id. It cuts each back to the sent length first (rank 0's
//    engine rolls a failed step back; a preempted sequence comes back from 0), then runs the same
//    forward and drops the logits.
//  - What rank 0 did to its caches between two messages goes with the next message, in order, as cache
//    operations: a sequence let go of (finished, preempted, cancelled), and under prefix caching an
//    entry made from a sequence's cache, a sequence started from a fork of an entry, an entry dropped.
//    Rank 0 numbers the entries; a follower keeps one KvCache per entry id beside those per sequence
//    id and replays the operations, so that it shares blocks (copy on write) and frees them at the same
//    steps as rank 0: its blocks hold the same K/V (the same forward computed them on every rank) and
//    its pool holds as many blocks as rank 0's for the same layers.
//  - An idle rank 0 sends a keep-alive at least every `keepalive_seconds`, so that a follower's
//    receive deadline (the communicator's timeout) means "rank 0 is gone", not "no traffic".
//  - close() ends the followers' loop: they return and exit 0.
// Threads: the mirror is used by the scheduler's engine thread only (the communicator's one user),
// close() after that thread ended.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "day0/core/status.h"
#include "day0/dist/communicator.h"
#include "day0/runtime/engine.h"

namespace day0::serve {

// One change rank 0 made to its caches, outside a forward. Ids are rank 0's sequence ids and prefix
// cache entry ids.
enum class CacheOpKind : int64_t {
  kRelease = 1,       // sequence `sequence` holds no cache any more
  kPrefixInsert = 2,  // entry `entry` := fork of sequence `sequence`'s cache cut back to `tokens`
  kPrefixFork = 3,    // sequence `sequence` (holding none) := fork of entry `entry` cut back to `tokens`
  kPrefixDrop = 4,    // entry `entry` is gone
};
struct CacheOp {
  CacheOpKind kind = CacheOpKind::kRelease;
  int64_t sequence = 0;
  int64_t entry = 0;
  int64_t tokens = 0;
  bool operator==(const CacheOp&) const = default;
};

// One message from rank 0, as it travels: int64 words.
enum class StepMessageKind : int64_t { kStep = 1, kKeepAlive = 2, kClose = 3 };
struct StepMessage {
  struct Sequence {
    int64_t id = 0;
    int64_t cached = 0;  // tokens its cache holds before the step
    int64_t feeds = 0;   // tokens it takes from `tokens`, in order
    bool operator==(const Sequence&) const = default;
  };
  StepMessageKind kind = StepMessageKind::kKeepAlive;
  bool last_only = false;
  std::vector<CacheOp> ops;  // applied first, in order
  std::vector<Sequence> sequences;
  std::vector<int32_t> tokens;
  bool operator==(const StepMessage&) const = default;
};
std::vector<int64_t> encode_step_message(const StepMessage& message);
// Every field checked: kind, counts against the word count, op kinds, ids and lengths not negative,
// each sequence's tokens inside the message, token ids int32. A message that fails is an error.
Result<StepMessage> decode_step_message(std::span<const int64_t> words);

// A follower's caches: one per rank 0 sequence id and one per prefix cache entry id. Every operation
// is checked against what is held: naming a sequence or entry that is not there (or, to make one,
// that is), or a length the cache does not hold, means this rank is out of step with rank 0: an error.
class FollowerCaches {
 public:
  explicit FollowerCaches(std::function<KvCache()> new_cache) : new_cache_(std::move(new_cache)) {}
  Status apply(const CacheOp& op);
  // The cache of sequence `id` for a step that finds `cached` tokens in it: a new one when there is
  // none (cached must then be 0), cut back when it holds more (rank 0 rolled a failed step back).
  Result<KvCache*> for_step(int64_t id, int64_t cached);
  size_t sequences() const { return sequences_.size(); }
  size_t entries() const { return entries_.size(); }

 private:
  std::function<KvCache()> new_cache_;
  std::map<int64_t, KvCache> sequences_;  // by rank 0's sequence id
  std::map<int64_t, KvCache> entries_;    // by rank 0's prefix cache entry id
};

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
  // Prefix cache entry `entry` was made from sequence `id`'s cache cut back to `tokens`.
  void prefix_insert(uint64_t entry, uint64_t id, int64_t tokens);
  // Sequence `id` starts from a fork of entry `entry` cut back to `tokens`.
  void prefix_fork(uint64_t id, uint64_t entry, int64_t tokens);
  // Entry `entry` was dropped.
  void prefix_drop(uint64_t entry);
  // Sends a keep-alive (and pending releases) when nothing was sent for keepalive_seconds.
  Status keepalive();
  // Ends the followers' loop (once; later calls do nothing), with the operations still pending: every
  // follower then checks that it holds no cache and no block, as rank 0 after letting go of everything.
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
  Status send(StepMessage& message);
  dist::Communicator& world_;
  std::vector<dist::Communicator*> groups_;
  std::chrono::duration<double> keepalive_;
  std::chrono::steady_clock::time_point last_sent_;
  std::vector<CacheOp> ops_;  // since the last message
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
