#pragma once
// A read-only memory map of a whole file. Views into it stay valid while the MappedFile lives; the
// object is movable, not copyable. Thread-safe to read from many threads.
#include <cstdint>
#include <span>
#include <string>

#include "day0/core/status.h"

namespace day0 {

// Bytes of this process's file mappings that sit in 2 MiB page-table entries (FilePmdMapped of
// /proc/self/smaps_rollup); 0 where the kernel does not say.
uint64_t file_bytes_in_huge_pages();

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
  // For weights read again and again (every decoded token streams them): asks for 2 MiB pages. A page
  // not cached yet is then read into a 2 MiB folio and mapped with one page-table entry, which lets a
  // GEMV stream up to a third faster than over 4 KiB pages (Linux 6.18, Zen 4: 34 against 28 GB/s);
  // pages cached already keep the folio size they were cached with. False where the kernel refuses
  // (transparent huge pages off): a hint, nothing depends on it.
  bool advise_huge_pages() const;
  // Drops this file's clean pages from the page cache (pages mapped by anyone stay), so that the next
  // reads come from the disk into folios of the size the mapping now asks for. Costs one more read of
  // the file; changes no byte anyone sees.
  Status drop_cached_pages() const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace day0
