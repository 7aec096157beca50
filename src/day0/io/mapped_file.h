#pragma once
// A read-only memory map of a whole file. Views into it stay valid while the MappedFile lives; the
// object is movable, not copyable. Thread-safe to read from many threads.
#include <cstdint>
#include <span>
#include <string>

#include "day0/core/status.h"

namespace day0 {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span (mmap refuses zero lengths).
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hint that the whole file will be read front to back (larger readahead).
  void advise_sequential() const;
  // Asks the kernel to start reading the whole file in the background (cold-cache loading).
  void advise_willneed() const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace day0
