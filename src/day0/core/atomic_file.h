#pragma once
// Files and folders that are never seen half-written, and temporaries that never outlive the run.
//  - write_file_atomic: the bytes go to a mkstemp name "<dir>/.<name>.tmp-<pid>-XXXXXX" and are
//    renamed over <path> only once complete and flushed.
//  - TempDir: a mkdtemp folder "<parent>/.<stem>.tmp-<pid>-XXXXXX", removed when the object dies
//    (every return and exception path) unless committed (renamed into place).
//  - Every live temporary is registered with a SIGINT/SIGTERM handler that removes it (async-signal-
//    safe syscalls only) and re-raises the signal. What SIGKILL leaves behind carries the dead pid
//    in its name: remove_stale_temps deletes such names on the next run.
#include <filesystem>
#include <string>
#include <string_view>

#include "day0/core/status.h"

namespace day0 {

Status write_file_atomic(const std::string& path, std::string_view content);

// Installs the SIGINT/SIGTERM cleanup handler once (idempotent). The helpers below call it.
void install_temp_file_cleanup();

// Removes "<dir>/.<stem>.tmp-<pid>-*" entries (files or folders) whose pid is no longer running.
// An empty stem matches every stem. Returns how many were removed.
int remove_stale_temps(const std::filesystem::path& dir, std::string_view stem = "");

// The absolute path of an output folder a TempDir will be committed to, checked before any work:
// it must be absent or an empty directory, and its parent must exist (errors name `out_dir`).
Result<std::filesystem::path> check_output_folder(const std::string& out_dir);

class TempDir {
 public:
  // Creates "<parent>/.<stem>.tmp-<pid>-XXXXXX" with mkdtemp.
  static Result<TempDir> create(const std::filesystem::path& parent, std::string_view stem);
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::filesystem::path& path() const { return path_; }
  // Renames the folder to `target` (an absent path or an empty folder, replaced); from then on the
  // folder is no longer temporary.
  Status commit_to(const std::filesystem::path& target);
  // The folder stays where it is and is no longer removed (e.g. after the caller renamed it).
  void release();

 private:
  TempDir() = default;
  std::filesystem::path path_;
  int slot_ = -1;
};

}  // namespace day0
