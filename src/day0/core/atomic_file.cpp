#include "day0/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

namespace day0 {

namespace {

// Fixed slots so the signal handler touches no heap: each holds a NUL-terminated path or is empty.
constexpr size_t kSlots = 16;
constexpr size_t kPathMax = 4096;
std::array<std::array<char, kPathMax>, kSlots> g_temp_paths{};
std::array<std::atomic<bool>, kSlots> g_in_use{};
std::once_flag g_install_once;

extern "C" void cleanup_and_reraise(int sig) {
  for (size_t i = 0; i < kSlots; ++i) {
    if (g_in_use[i].load()) unlink(g_temp_paths[i].data());
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int claim_slot(const std::string& path) {
  if (path.size() + 1 > kPathMax) return -1;
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (g_in_use[i].compare_exchange_strong(expected, true)) {
      std::memcpy(g_temp_paths[i].data(), path.c_str(), path.size() + 1);
      return static_cast<int>(i);
    }
  }
  return -1;  // all slots busy: the write still works, only the signal cleanup is lost
}

void release_slot(int slot) {
  if (slot >= 0) g_in_use[static_cast<size_t>(slot)].store(false);
}

}  // namespace

void install_temp_file_cleanup() {
  std::call_once(g_install_once, [] {
    std::signal(SIGINT, cleanup_and_reraise);
    std::signal(SIGTERM, cleanup_and_reraise);
  });
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  install_temp_file_cleanup();
  const std::string temp = path + ".tmp-" + std::to_string(getpid());
  const int slot = claim_slot(temp);
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    release_slot(slot);
    return io_error(path + ": cannot create: " + std::strerror(errno));
  }
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(temp.c_str());
      release_slot(slot);
      return io_error(path + ": write failed: " + why);
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temp.c_str());
    release_slot(slot);
    return io_error(path + ": flush failed: " + why);
  }
  if (rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temp.c_str());
    release_slot(slot);
    return io_error(path + ": rename failed: " + why);
  }
  release_slot(slot);
  return Status::ok();
}

}  // namespace day0
