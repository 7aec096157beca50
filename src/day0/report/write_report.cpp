#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "day0/core/atomic_file.h"
#include "day0/report/render.h"

namespace day0::report {
namespace {

namespace fs = std::filesystem;

struct OutPaths {
  fs::path target;  // absolute --out
  fs::path parent;
  std::string name;
};

Result<OutPaths> out_paths(const std::string& out_dir) {
  if (out_dir.empty()) return invalid_argument("--out: empty path");
  std::error_code ec;
  OutPaths p;
  p.target = fs::absolute(out_dir, ec).lexically_normal();
  if (p.target.filename().empty()) p.target = p.target.parent_path();
  p.parent = p.target.parent_path();
  p.name = p.target.filename().string();
  if (p.name.empty() || p.name == "." || p.name == "..") {
    return invalid_argument(fmt::format("--out {}: name a folder for the report", out_dir));
  }
  return p;
}

Status write_plain(const fs::path& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path.string() + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return io_error(path.string() + ": write failed: " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return io_error(path.string() + ": flush failed");
  return Status::ok();
}

}  // namespace

ReportDirLock& ReportDirLock::operator=(ReportDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ReportDirLock::~ReportDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

Result<ReportDirLock> prepare_report_dir(const std::string& out_dir) {
  D0_ASSIGN_OR_RETURN(OutPaths p, out_paths(out_dir));
  std::error_code ec;
  if (!fs::is_directory(p.parent, ec)) {
    return invalid_argument(
        fmt::format("--out {}: the parent folder {} does not exist", out_dir, p.parent.string()));
  }
  if (::access(p.parent.c_str(), W_OK) != 0) {
    return invalid_argument(
        fmt::format("--out {}: the parent folder {} is not writable", out_dir, p.parent.string()));
  }
  const auto status = fs::symlink_status(p.target, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      return invalid_argument(fmt::format("--out {}: exists and is not a folder", out_dir));
    }
    for (const auto& entry : fs::directory_iterator(p.target, ec)) {
      const std::string name = entry.path().filename().string();
      bool ours = false;
      for (const char* f : kReportFiles) ours = ours || name == f;
      if (!ours && name.rfind(".report.", 0) != 0) {  // .report.*.tmp-<pid>-* from an older writer
        return invalid_argument(
            fmt::format("--out {}: holds {} besides a report; the report folder is replaced as a whole, so "
                        "give a new or report-only folder",
                        out_dir, name));
      }
    }
  }
  const fs::path lock_path = p.parent / ("." + p.name + ".lock");
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(lock_path.string() + ": cannot open the lock file: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return invalid_argument(fmt::format("--out {}: another day0 run is writing a report there", out_dir));
  }
  remove_stale_temps(p.parent, p.name);
  remove_stale_temps(p.target);
  return ReportDirLock(fd);
}

Status write_report_files(const Report& report, const std::string& out_dir) {
  D0_ASSIGN_OR_RETURN(OutPaths p, out_paths(out_dir));
  // Render everything before touching the file system, so a failure leaves the old report intact.
  const std::string json = to_json(report).dump(2) + "\n";
  const std::string md = render_markdown(report);
  const std::string html = render_html(report);
  D0_ASSIGN_OR_RETURN(TempDir fresh, TempDir::create(p.parent, p.name));
  D0_RETURN_IF_ERROR(write_plain(fresh.path() / "report.json", json));
  D0_RETURN_IF_ERROR(write_plain(fresh.path() / "report.md", md));
  D0_RETURN_IF_ERROR(write_plain(fresh.path() / "report.html", html));
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p.target, ec))) return fresh.commit_to(p.target);
  // Swap the fresh folder with the old one in one step; the old set then sits at the temporary
  // name and goes away with `fresh`.
  if (::renameat2(AT_FDCWD, fresh.path().c_str(), AT_FDCWD, p.target.c_str(), RENAME_EXCHANGE) == 0) {
    return Status::ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    return io_error(fmt::format("{}: cannot swap in the new report: {}", out_dir, std::strerror(errno)));
  }
  // No RENAME_EXCHANGE here: move the old set aside first (never a mixed set), then rename.
  D0_ASSIGN_OR_RETURN(TempDir old_set, TempDir::create(p.parent, p.name));
  if (::rename(p.target.c_str(), old_set.path().c_str()) != 0) {
    return io_error(fmt::format("{}: cannot move the old report aside: {}", out_dir, std::strerror(errno)));
  }
  return fresh.commit_to(p.target);
}

}  // namespace day0::report
