#pragma once
// The collectives distributed inference needs, behind one small interface: an MPI implementation
// (mpi_communicator.cpp, built where MPI is installed), a single-process one, and room for NCCL on
// GPUs later. Every blocking call has a deadline: a peer that died or hangs becomes an IoError
// status naming the operation and the silent rank(s), never a hang.
//
// Ownership and threads: a Communicator is used by one thread at a time (the engine's caller). After
// a failed call the communicator is broken (later calls fail at once): the collective that timed out
// cannot be completed, so the process must stop (abort_world()).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "day0/core/status.h"

namespace day0::dist {

struct CommOptions {
  // Longest wait of one blocking call (a collective or a point-to-point message) before it fails.
  double timeout_seconds = 30.0;
  // How often a waiting rank tells its peers it is alive; a peer silent for longer than
  // max(4 x this, 1 s) when a call times out is named as dead or hung.
  double heartbeat_seconds = 0.1;
};

// What the blocking calls cost this rank: the communication idle time of the workflow.
struct CommStats {
  int64_t calls = 0;
  double wait_seconds = 0;  // inside blocking calls: transfer plus waiting for slower peers
  uint64_t bytes_sent = 0;  // payload this rank contributed
  // Overlapped all-reduces (start_all_reduce_sum): how many, and the compute they ran behind (from
  // the start to finish_all_reduce). Their remaining wait is in wait_seconds like any call's.
  int64_t overlapped_calls = 0;
  double overlapped_compute_seconds = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "rank 1 of 2" (and the world rank for a sub-group), for messages.
  virtual std::string describe_rank(int rank) const = 0;

  // data [n] float32, summed over ranks in place (every rank gets the sum).
  virtual Status all_reduce_sum(std::span<float> data) = 0;
  // The same sum, started now and finished by finish_all_reduce(), so that compute which does not
  // depend on it runs in between; `data` must not be touched until then. At most one pending per
  // communicator and no other call on it in between (every rank issues the same sequence). The base
  // version sums at once: a communicator that cannot overlap is still correct.
  virtual Status start_all_reduce_sum(std::span<float> data) { return all_reduce_sum(data); }
  virtual Status finish_all_reduce() { return Status::ok(); }
  // send [n bytes] from every rank -> recv [size * n bytes] in rank order.
  virtual Status all_gather(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  // Rank r sends send_counts[p] bytes (consecutive in `send`, in peer order) to every peer p and
  // receives recv_counts[p] bytes from it (consecutive in `recv`). Counts are exchanged beforehand by
  // the caller (all_gather or a fixed all-to-all of counts).
  virtual Status all_to_all_v(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                              std::span<std::byte> recv, std::span<const int64_t> recv_counts) = 0;
  virtual Status send(std::span<const std::byte> data, int peer, int tag) = 0;
  virtual Status recv(std::span<std::byte> data, int peer, int tag) = 0;
  virtual Status barrier() = 0;
  // Between calls (a rank idle for a while): answers and drains the peers' heartbeats, so that they
  // do not pile up while this rank waits on something else. Never blocks.
  virtual void poll() {}
  // The ranks that pass the same `color` form a new group, ordered by `key` (MPI_Comm_split).
  // Collective over this communicator.
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  // Typed conveniences over the byte calls.
  template <typename T>
  Status all_gather_of(std::span<const T> send, std::span<T> recv) {
    return all_gather(std::as_bytes(send), std::as_writable_bytes(recv));
  }

 protected:
  CommStats stats_;
};

// A communicator of one process: collectives are copies, a message to itself is queued.
std::unique_ptr<Communicator> make_single_process_communicator();

// Whether this build has MPI (CMake found it) and whether the process was started by mpirun.
bool mpi_available();
bool launched_by_mpirun();
// MPI_COMM_WORLD (MPI initialised on the first call; finalised at exit). Unsupported when built
// without MPI.
Result<std::shared_ptr<Communicator>> open_mpi_world(const CommOptions& options = {});
// Ends every rank of the job with `exit_code` after a failure one rank cannot recover from (a peer
// died or hung): MPI_Abort under MPI, otherwise std::exit.
[[noreturn]] void abort_world(int exit_code);

// A communication failure inside code that cannot return a Status (the engine's blocks): thrown by
// check_comm(), turned back into its Status by Engine::forward.
class CommError : public std::runtime_error {
 public:
  explicit CommError(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};
inline void check_comm(const Status& st) {
  if (!st.is_ok()) throw CommError(st);
}

}  // namespace day0::dist
