#pragma once
// Streamed SHA-256 (OpenSSL EVP) of files, one file per thread. Progress is reported in bytes through
// a callback that may be called from several threads at once.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"

namespace day0 {

// Lower-case hex digest of a byte string.
std::string sha256_hex(std::span<const uint8_t> bytes);

using BytesProgress = std::function<void(uint64_t bytes_done_delta)>;

// Reads `path` in 8 MiB chunks; `on_bytes` (optional) gets each chunk's size.
Result<std::string> sha256_file(const std::string& path, const BytesProgress& on_bytes = nullptr);

// Hashes every path with up to `threads` threads (files are the unit of parallelism). `on_done`
// (optional) is called once per finished file, from a worker thread, under a lock.
std::vector<Result<std::string>> sha256_files(
    const std::vector<std::string>& paths, int threads, const BytesProgress& on_bytes = nullptr,
    const std::function<void(size_t index, const Result<std::string>&)>& on_done = nullptr);

}  // namespace day0
