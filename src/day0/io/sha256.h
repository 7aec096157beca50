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

// Sees every chunk the hash reads (file offset, bytes), so a second consumer needs no second read.
using ChunkObserver = std::function<void(uint64_t offset, std::span<const uint8_t> bytes)>;

// Reads `path` in 8 MiB chunks; `on_bytes` (optional) gets each chunk's size, `on_chunk` (optional)
// the chunk itself. A path that is not a regular file (a device, FIFO, directory) is refused before
// any read: /dev/zero would never end.
Result<std::string> sha256_file(const std::string& path, const BytesProgress& on_bytes = nullptr,
                                const ChunkObserver& on_chunk = nullptr);

// Hashes every path with up to `threads` threads (files are the unit of parallelism). `on_done`
// (optional) is called once per finished file, from a worker thread, under a lock.
std::vector<Result<std::string>> sha256_files(
    const std::vector<std::string>& paths, int threads, const BytesProgress& on_bytes = nullptr,
    const std::function<void(size_t index, const Result<std::string>&)>& on_done = nullptr,
    const std::function<void(size_t index, uint64_t offset, std::span<const uint8_t> bytes)>& on_chunk =
        nullptr);

}  // namespace day0
