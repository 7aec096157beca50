#include "day0/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace day0 {

namespace {

// Fixed slots so the signal handler touches no heap: each holds a NUL-terminated path or is empty.
constexpr size_t kSlots = 32;
constexpr size_t kPathMax = 4096;
std::array<std::array<char, kPathMax>, kSlots> g_temp_paths{};
std::array<std::atomic<bool>, kSlots> g_in_use{};
std::array<std::atomic<bool>, kSlots> g_is_dir{};
std::array<std::atomic<bool>, kSlots> g_ready{};  // the path is written: the handler may act on it
std::once_flag g_install_once;

// Removes everything inside the directory open as `dir_fd`, then closes it; async-signal-safe
// (getdents64 + unlinkat + openat). Depth is bounded: our temporaries are a few levels deep.
void remove_contents_signal_safe(int dir_fd, int depth) {
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir_fd, buf, sizeof(buf));
    if (n <= 0) break;
    bool removed_any = false;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<struct dirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      if (d->d_type == DT_DIR) {
        if (depth < 8) {
          const int sub = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub >= 0) remove_contents_signal_safe(sub, depth + 1);
        }
        unlinkat(dir_fd, name, AT_REMOVEDIR);
      } else {
        unlinkat(dir_fd, name, 0);
      }
      removed_any = true;
    }
    if (removed_any) lseek(dir_fd, 0, SEEK_SET);  // entries moved under us: rescan
  }
  close(dir_fd);
}

void remove_path_signal_safe(const char* path, bool is_dir) {
  if (!is_dir) {
    unlink(path);
    return;
  }
  const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) remove_contents_signal_safe(fd, 0);
  rmdir(path);
}

extern "C" void cleanup_and_reraise(int sig) {
  for (size_t i = 0; i < kSlots; ++i) {
    if (g_ready[i].load()) remove_path_signal_safe(g_temp_paths[i].data(), g_is_dir[i].load());
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int claim_slot(const std::string& path, bool is_dir) {
  if (path.size() + 1 > kPathMax) return -1;
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (g_in_use[i].compare_exchange_strong(expected, true)) {
      // Publish the path before the handler may read it.
      std::memcpy(g_temp_paths[i].data(), path.c_str(), path.size() + 1);
      g_is_dir[i].store(is_dir);
      g_ready[i].store(true);
      return static_cast<int>(i);
    }
  }
  return -1;  // all slots busy: the work still succeeds, only the signal cleanup is lost
}

void release_slot(int slot) {
  if (slot < 0) return;
  g_ready[static_cast<size_t>(slot)].store(false);
  g_in_use[static_cast<size_t>(slot)].store(false);
}

// ".<stem>.tmp-<pid>-": the prefix of every temporary name of this process.
std::string temp_prefix(std::string_view stem) {
  std::string out(1, '.');
  out.append(stem);
  out.append(".tmp-");
  out.append(std::to_string(getpid()));
  out.push_back('-');
  return out;
}

}  // namespace

void install_temp_file_cleanup() {
  std::call_once(g_install_once, [] {
    std::signal(SIGINT, cleanup_and_reraise);
    std::signal(SIGTERM, cleanup_and_reraise);
  });
}

int remove_stale_temps(const std::filesystem::path& dir, std::string_view stem) {
  std::error_code ec;
  int removed = 0;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return 0;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 2 || name[0] != '.') continue;
    const size_t tag = name.find(".tmp-", 1);
    if (tag == std::string::npos) continue;
    if (!stem.empty() && name.compare(1, tag - 1, stem) != 0) continue;
    const char* digits = name.c_str() + tag + 5;
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '-' || pid <= 0) continue;
    if (pid == getpid()) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    std::filesystem::remove_all(entry.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  install_temp_file_cleanup();
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string temp = (dir / (temp_prefix(target.filename().string()) + "XXXXXX")).string();
  const int fd = mkstemp(temp.data());
  if (fd < 0) return io_error(path + ": cannot create a temporary file: " + std::strerror(errno));
  const int slot = claim_slot(temp, false);
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    unlink(temp.c_str());
    release_slot(slot);
    return io_error(path + ": " + what + ": " + why);
  };
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      close(fd);
      return fail("write failed");
    }
    written += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) {
    close(fd);
    return fail("flush failed");
  }
  if (close(fd) != 0) return fail("flush failed");
  if (rename(temp.c_str(), path.c_str()) != 0) return fail("rename failed");
  release_slot(slot);
  return Status::ok();
}

Result<std::filesystem::path> check_output_folder(const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = fs::absolute(out_dir, ec);
  if (fs::exists(target, ec) && !(fs::is_directory(target, ec) && fs::is_empty(target, ec))) {
    return invalid_argument(out_dir + ": already exists and is not an empty directory");
  }
  const fs::path parent = target.parent_path();
  if (!fs::is_directory(parent, ec))
    return not_found(parent.string() + ": no such directory (parent of --out)");
  return target;
}

Result<TempDir> TempDir::create(const std::filesystem::path& parent, std::string_view stem) {
  install_temp_file_cleanup();
  std::string templ = (parent / (temp_prefix(stem) + "XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) {
    return io_error(templ + ": cannot create a temporary folder: " + std::strerror(errno));
  }
  TempDir dir;
  dir.path_ = templ;
  dir.slot_ = claim_slot(templ, true);
  return dir;
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)), slot_(other.slot_) {
  other.path_.clear();
  other.slot_ = -1;
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
      release_slot(slot_);
    }
    path_ = std::move(other.path_);
    slot_ = other.slot_;
    other.path_.clear();
    other.slot_ = -1;
  }
  return *this;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  release_slot(slot_);
}

void TempDir::release() {
  release_slot(slot_);
  slot_ = -1;
  path_.clear();
}

Status TempDir::commit_to(const std::filesystem::path& target) {
  std::error_code ec;
  if (std::filesystem::is_directory(target, ec) && std::filesystem::is_empty(target, ec)) {
    std::filesystem::remove(target, ec);
  }
  // mkdtemp made the folder 0700; a checkpoint folder is as readable as one mkdir makes under the usual
  // umask (0755).
  std::filesystem::permissions(path_,
                               std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                   std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                   std::filesystem::perms::others_exec,
                               ec);
  if (::rename(path_.c_str(), target.c_str()) != 0) {
    return io_error("cannot rename " + path_.string() + " to " + target.string() + ": " +
                    std::strerror(errno));
  }
  release();
  return Status::ok();
}

}  // namespace day0
