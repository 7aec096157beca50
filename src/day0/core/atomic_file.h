#pragma once
// Whole-file writes that are never seen half-written: the bytes go to "<path>.tmp-<pid>" and are
// renamed over <path> only once complete and flushed. A SIGINT/SIGTERM during the write removes the
// temporary file (the handler unlinks every registered temp path, then re-raises the signal).
#include <string>
#include <string_view>

#include "day0/core/status.h"

namespace day0 {

Status write_file_atomic(const std::string& path, std::string_view content);

// Installs the SIGINT/SIGTERM cleanup handler once (idempotent). write_file_atomic calls it.
void install_temp_file_cleanup();

}  // namespace day0
