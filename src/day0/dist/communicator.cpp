// The single-process communicator, and the entry points a build without MPI answers.
#include "day0/dist/communicator.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include <fmt/format.h>

namespace day0::dist {
namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe_rank(int rank) const override { return fmt::format("rank {} of 1", rank); }

  Status all_reduce_sum(std::span<float>) override {
    ++stats_.calls;
    return Status::ok();
  }
  Status all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    ++stats_.calls;
    if (recv.size() != send.size()) {
      return invalid_argument(
          fmt::format("all_gather: {} bytes sent, {} expected back on 1 rank", send.size(), recv.size()));
    }
    if (!send.empty()) std::memmove(recv.data(), send.data(), send.size());
    return Status::ok();
  }
  Status all_to_all_v(std::span<const std::byte> send, std::span<const int64_t> send_counts,
                      std::span<std::byte> recv, std::span<const int64_t> recv_counts) override {
    ++stats_.calls;
    if (send_counts.size() != 1 || recv_counts.size() != 1 || send_counts[0] != recv_counts[0] ||
        send_counts[0] < 0 || static_cast<size_t>(send_counts[0]) > send.size() ||
        static_cast<size_t>(recv_counts[0]) > recv.size()) {
      return invalid_argument("all_to_all_v: counts do not match one rank's buffers");
    }
    if (send_counts[0] > 0) std::memmove(recv.data(), send.data(), static_cast<size_t>(send_counts[0]));
    return Status::ok();
  }
  Status send(std::span<const std::byte> data, int peer, int tag) override {
    ++stats_.calls;
    if (peer != 0) return invalid_argument(fmt::format("send to rank {}: the group has one rank", peer));
    queued_[tag].emplace_back(data.begin(), data.end());
    return Status::ok();
  }
  Status recv(std::span<std::byte> data, int peer, int tag) override {
    ++stats_.calls;
    if (peer != 0) return invalid_argument(fmt::format("recv from rank {}: the group has one rank", peer));
    auto it = queued_.find(tag);
    if (it == queued_.end() || it->second.empty()) {
      return io_error(fmt::format("recv from rank 0 (tag {}): nothing was sent; it would wait forever", tag));
    }
    std::vector<std::byte>& m = it->second.front();
    if (m.size() != data.size()) {
      return invalid_argument(
          fmt::format("recv (tag {}): message of {} bytes, buffer of {}", tag, m.size(), data.size()));
    }
    if (!m.empty()) std::memcpy(data.data(), m.data(), m.size());
    it->second.pop_front();
    return Status::ok();
  }
  Status barrier() override {
    ++stats_.calls;
    return Status::ok();
  }
  Result<std::unique_ptr<Communicator>> split(int, int) override {
    return std::unique_ptr<Communicator>(std::make_unique<SingleProcessCommunicator>());
  }

 private:
  std::map<int, std::deque<std::vector<std::byte>>> queued_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

bool launched_by_mpirun() {
  // OpenMPI's launcher sets OMPI_COMM_WORLD_SIZE; PMIx-based launchers (srun, prterun) PMIX_RANK.
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

#ifndef DAY0_HAVE_MPI
bool mpi_available() {
  return false;
}

Result<std::shared_ptr<Communicator>> open_mpi_world(const CommOptions&) {
  return unsupported(
      "this day0 was built without MPI: install OpenMPI (libopenmpi-dev, openmpi-bin; `make deps`) and "
      "rebuild to run distributed");
}

void abort_world(int exit_code) {
  std::exit(exit_code);
}
#endif

}  // namespace day0::dist
