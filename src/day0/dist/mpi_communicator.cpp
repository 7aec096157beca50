// The MPI communicator (built only where CMake found MPI). Every call is the non-blocking MPI form
// (MPI_Iallreduce, MPI_Iallgather, MPI_Ialltoallv, MPI_Isend / MPI_Irecv, MPI_Ibarrier) completed by
// polling MPI_Test against a deadline. While it polls, a rank sends a small heartbeat to each peer of
// the group on a duplicate communicator and drains theirs, so that when a call times out it can name
// the peers that stopped answering (dead or hung) rather than hang.
// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "day0/dist/communicator.h"

namespace day0::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHeartbeatTag = 7001;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(len));
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

class MpiCommunicator;
// Communicators alive now: quiesced (pending heartbeat receives cancelled) before MPI_Finalize.
std::mutex g_live_mutex;
std::set<MpiCommunicator*> g_live;
void finalize_at_exit();

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

Status ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::ok();
  if (mpi_finalized()) return failed_precondition("MPI was already finalised in this process");
  int provided = 0;
  // One thread calls MPI (the engine's caller); the CPU backend's pool never does.
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return io_error("MPI_Init_thread failed: " + mpi_error_text(rc));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalize_at_exit);
  return Status::ok();
}

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed with the communicator).
  MpiCommunicator(MPI_Comm comm, const CommOptions& options) : comm_(comm), options_(options) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // World ranks of the group's members, for messages.
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> local(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) local[static_cast<size_t>(r)] = r;
    world_ranks_.assign(static_cast<size_t>(size_), -1);
    MPI_Group_translate_ranks(group, size_, local.data(), world, world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    MPI_Comm_dup(comm_, &heartbeat_comm_);
    MPI_Comm_set_errhandler(heartbeat_comm_, MPI_ERRORS_RETURN);
    peers_.resize(static_cast<size_t>(size_));
    const auto now = Clock::now();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = peers_[static_cast<size_t>(p)];
      peer.last_seen = now;
      MPI_Irecv(&peer.in, 1, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_, &peer.recv);
    }
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.insert(this);
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      g_live.erase(this);
    }
    if (mpi_finalized()) return;
    quiesce();
    MPI_Comm_free(&heartbeat_comm_);
    MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // Cancels the pending heartbeat receives and lets go of pending heartbeat sends.
  void quiesce() {
    for (Peer& peer : peers_) {
      if (peer.recv != MPI_REQUEST_NULL) {
        MPI_Cancel(&peer.recv);
        MPI_Wait(&peer.recv, MPI_STATUS_IGNORE);
      }
      if (peer.send != MPI_REQUEST_NULL) MPI_Request_free(&peer.send);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe_rank(int r) const override {
    const int world = r >= 0 && r < size_ ? world_ranks_[static_cast<size_t>(r)] : -1;
    if (world == r) return fmt::format("rank {} of {}", r, size_);
    return fmt::format("rank {} of {} (world rank {})", r, size_, world);
  }

  Status all_reduce_sum(std::span<float> data) override {
    D0_RETURN_IF_ERROR(usable("all_reduce"));
    D0_ASSIGN_OR_RETURN(int n, count(data.size(), "all_reduce"));
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(
        started(MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, comm_, &req), "all_reduce"));
    return wait(req, fmt::format("all_reduce of {} floats", n), -1, data.size_bytes());
  }

  Status start_all_reduce_sum(std::span<float> data) override {
    D0_RETURN_IF_ERROR(usable("all_reduce"));
    D0_ASSIGN_OR_RETURN(int n, count(data.size(), "all_reduce"));
    D0_RETURN_IF_ERROR(started(
        MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, comm_, &pending_), "all_reduce"));
    pending_floats_ = n;
    pending_bytes_ = data.size_bytes();
    pending_since_ = Clock::now();
    return Status::ok();
  }

  Status finish_all_reduce() override {
    if (pending_ == MPI_REQUEST_NULL) return Status::ok();
    ++stats_.overlapped_calls;
    stats_.overlapped_compute_seconds += seconds(Clock::now() - pending_since_);
    return wait(pending_, fmt::format("all_reduce of {} floats (overlapped)", pending_floats_), -1,
                pending_bytes_);
  }

  Status all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    D0_RETURN_IF_ERROR(usable("all_gather"));
    if (recv.size() != send.size() * static_cast<size_t>(size_)) {
      return invalid_argument(
          fmt::format("all_gather: {} bytes sent by each of {} ranks, {} bytes to receive", send.size(),
                      size_, recv.size()));
    }
    D0_ASSIGN_OR_RETURN(int n, count(send.size(), "all_gather"));
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(started(
        MPI_Iallgather(send.data(), n, MPI_BYTE, recv.data(), n, MPI_BYTE, comm_, &req), "all_gather"));
    return wait(req, fmt::format("all_gather of {} bytes", n), -1, send.size());
  }

  Status all_to_all_v(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                      std::span<std::byte> recv, std::span<const int64_t> recv_counts) override {
    D0_RETURN_IF_ERROR(usable("all_to_all_v"));
    const auto n = static_cast<size_t>(size_);
    if (send_counts.size() != n || recv_counts.size() != n) {
      return invalid_argument(fmt::format("all_to_all_v: {} send and {} receive counts for {} ranks",
                                          send_counts.size(), recv_counts.size(), size_));
    }
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    int64_t send_total = 0, recv_total = 0;
    for (size_t p = 0; p < n; ++p) {
      if (send_counts[p] < 0 || recv_counts[p] < 0) return invalid_argument("all_to_all_v: a negative count");
      D0_ASSIGN_OR_RETURN(sd[p], count(static_cast<size_t>(send_total), "all_to_all_v"));
      D0_ASSIGN_OR_RETURN(rd[p], count(static_cast<size_t>(recv_total), "all_to_all_v"));
      D0_ASSIGN_OR_RETURN(sc[p], count(static_cast<size_t>(send_counts[p]), "all_to_all_v"));
      D0_ASSIGN_OR_RETURN(rc[p], count(static_cast<size_t>(recv_counts[p]), "all_to_all_v"));
      send_total += send_counts[p];
      recv_total += recv_counts[p];
    }
    if (static_cast<size_t>(send_total) > send.size() || static_cast<size_t>(recv_total) > recv.size()) {
      return invalid_argument(
          fmt::format("all_to_all_v: counts need {} bytes to send and {} to receive, buffers "
                      "hold {} and {}",
                      send_total, recv_total, send.size(), recv.size()));
    }
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(started(MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, recv.data(),
                                              rc.data(), rd.data(), MPI_BYTE, comm_, &req),
                               "all_to_all_v"));
    return wait(req, fmt::format("all_to_all_v of {} bytes", send_total), -1,
                static_cast<uint64_t>(send_total));
  }

  Status send(std::span<const std::byte> data, int peer, int tag) override {
    D0_RETURN_IF_ERROR(usable("send"));
    D0_RETURN_IF_ERROR(check_peer(peer, tag, "send"));
    D0_ASSIGN_OR_RETURN(int n, count(data.size(), "send"));
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(started(MPI_Isend(data.data(), n, MPI_BYTE, peer, tag, comm_, &req), "send"));
    return wait(req, fmt::format("send of {} bytes to {} (tag {})", n, describe_rank(peer), tag), peer,
                data.size());
  }

  Status recv(std::span<std::byte> data, int peer, int tag) override {
    D0_RETURN_IF_ERROR(usable("recv"));
    D0_RETURN_IF_ERROR(check_peer(peer, tag, "recv"));
    D0_ASSIGN_OR_RETURN(int n, count(data.size(), "recv"));
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(started(MPI_Irecv(data.data(), n, MPI_BYTE, peer, tag, comm_, &req), "recv"));
    return wait(req, fmt::format("recv of {} bytes from {} (tag {})", n, describe_rank(peer), tag), peer, 0);
  }

  void poll() override {
    if (broken_.empty()) heartbeat(Clock::now());
  }

  Status barrier() override {
    D0_RETURN_IF_ERROR(usable("barrier"));
    MPI_Request req = MPI_REQUEST_NULL;
    D0_RETURN_IF_ERROR(started(MPI_Ibarrier(comm_, &req), "barrier"));
    return wait(req, "barrier", -1, 0);
  }

  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    // MPI_Comm_split blocks without a deadline: a timed barrier first finds a dead peer.
    D0_RETURN_IF_ERROR(barrier());
    MPI_Comm out = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(comm_, color, key, &out);
    if (rc != MPI_SUCCESS) return io_error("MPI_Comm_split failed: " + mpi_error_text(rc));
    return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(out, options_));
  }

 private:
  struct Peer {
    MPI_Request recv = MPI_REQUEST_NULL;
    MPI_Request send = MPI_REQUEST_NULL;
    int64_t in = 0;
    int64_t out = 0;
    Clock::time_point last_seen;
  };

  Status usable(const char* op) const {
    if (!broken_.empty()) {
      return io_error(fmt::format("{} on {}: the group is unusable after an earlier failure ({})", op,
                                  describe_rank(rank_), broken_));
    }
    // The ranks must issue the same sequence: a call between start and finish would be matched out of
    // order on some rank.
    if (pending_ != MPI_REQUEST_NULL) {
      return internal_error(
          fmt::format("{} on {}: an overlapped all_reduce is still pending", op, describe_rank(rank_)));
    }
    return Status::ok();
  }
  static Result<int> count(size_t n, const char* op) {
    if (n > static_cast<size_t>(INT_MAX))
      return out_of_range(fmt::format("{}: {} bytes exceed one MPI message ({} max)", op, n, INT_MAX));
    return static_cast<int>(n);
  }
  Status check_peer(int peer, int tag, const char* op) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      return invalid_argument(fmt::format("{}: peer {} is not another rank of {}", op, peer, size_));
    if (tag < 0 || tag == kHeartbeatTag)
      return invalid_argument(fmt::format("{}: tag {} is reserved or negative", op, tag));
    return Status::ok();
  }
  Status started(int rc, const char* op) {
    if (rc == MPI_SUCCESS) return Status::ok();
    broken_ = fmt::format("{} could not start: {}", op, mpi_error_text(rc));
    return io_error(fmt::format("{} on {}: {}", op, describe_rank(rank_), broken_));
  }

  // Sends a heartbeat to every peer whose previous one has left, at most once an interval, and
  // drains the heartbeats that arrived.
  void heartbeat(Clock::time_point now) {
    if (size_ == 1) return;
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(options_.heartbeat_seconds));
    if (now - last_beat_ >= interval) {
      last_beat_ = now;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        Peer& peer = peers_[static_cast<size_t>(p)];
        int gone = 1;
        if (peer.send != MPI_REQUEST_NULL) MPI_Test(&peer.send, &gone, MPI_STATUS_IGNORE);
        if (!gone) continue;
        ++peer.out;
        MPI_Isend(&peer.out, 1, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_, &peer.send);
      }
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      Peer& peer = peers_[static_cast<size_t>(p)];
      for (int arrived = 1; arrived && peer.recv != MPI_REQUEST_NULL;) {
        arrived = 0;
        if (MPI_Test(&peer.recv, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (arrived) {
          peer.last_seen = now;
          MPI_Irecv(&peer.in, 1, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_, &peer.recv);
        }
      }
    }
  }

  // Who to blame when `op` timed out: the peers silent for longer than the heartbeat allows.
  std::string silent_peers(Clock::time_point now, int peer_of_op) const {
    const double limit = std::max(4 * options_.heartbeat_seconds, 1.0);
    std::vector<std::string> silent;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const double quiet = seconds(now - peers_[static_cast<size_t>(p)].last_seen);
      if (quiet > limit) silent.push_back(fmt::format("{} silent for {:.1f} s", describe_rank(p), quiet));
    }
    if (!silent.empty()) return fmt::format("{} (dead or hung)", fmt::join(silent, ", "));
    if (peer_of_op >= 0) return fmt::format("{} is alive but never matched it", describe_rank(peer_of_op));
    return "every peer is alive: the ranks are not in the same collective (a mismatch)";
  }

  Status wait(MPI_Request& req, const std::string& op, int peer_of_op, uint64_t bytes) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.timeout_seconds));
    for (int64_t polls = 0;; ++polls) {
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        broken_ = fmt::format("{} failed: {}", op, mpi_error_text(rc));
        return io_error(fmt::format("{} on {}: {}", op, describe_rank(rank_), mpi_error_text(rc)));
      }
      if (done) break;
      const auto now = Clock::now();
      heartbeat(now);
      if (now >= deadline) {
        broken_ = fmt::format("{} timed out", op);
        return io_error(fmt::format("{} timed out after {:.1f} s on {}: {}", op, seconds(now - start),
                                    describe_rank(rank_), silent_peers(now, peer_of_op)));
      }
      // Spin briefly (a fast peer answers in microseconds), then give the core away: under
      // oversubscription the peer being waited for may need this very core.
      if (polls > 200) {
        if (now - start > std::chrono::milliseconds(2)) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        } else {
          sched_yield();
        }
      }
    }
    ++stats_.calls;
    stats_.wait_seconds += seconds(Clock::now() - start);
    stats_.bytes_sent += bytes;
    return Status::ok();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm heartbeat_comm_ = MPI_COMM_NULL;
  CommOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  std::vector<Peer> peers_;  // [size], this rank's entry unused
  Clock::time_point last_beat_{};
  std::string broken_;  // why the group is unusable, empty while it is
  // The overlapped all-reduce between start_all_reduce_sum and finish_all_reduce.
  MPI_Request pending_ = MPI_REQUEST_NULL;
  int pending_floats_ = 0;
  uint64_t pending_bytes_ = 0;
  Clock::time_point pending_since_{};
};

void finalize_at_exit() {
  if (mpi_finalized()) return;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    for (MpiCommunicator* c : g_live) c->quiesce();
  }
  MPI_Finalize();
}

}  // namespace

bool mpi_available() {
  return true;
}

Result<std::shared_ptr<Communicator>> open_mpi_world(const CommOptions& options) {
  if (!(options.timeout_seconds > 0) || !(options.heartbeat_seconds > 0)) {
    return invalid_argument(fmt::format("communicator: timeout {} s and heartbeat {} s must be positive",
                                        options.timeout_seconds, options.heartbeat_seconds));
  }
  D0_RETURN_IF_ERROR(ensure_mpi_initialized());
  MPI_Comm world = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
  if (rc != MPI_SUCCESS) return io_error("MPI_Comm_dup(MPI_COMM_WORLD) failed: " + mpi_error_text(rc));
  return std::shared_ptr<Communicator>(std::make_shared<MpiCommunicator>(world, options));
}

void abort_world(int exit_code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

}  // namespace day0::dist
