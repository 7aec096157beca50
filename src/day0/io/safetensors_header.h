#pragma once
// Parsing and validation of a safetensors header (docs/models.md, "Safetensors files"). Nothing in a
// header is trusted: the length is bounded, the JSON must be well formed and shallow, every dtype known,
// every tensor's byte length must equal product(shape) x item size (overflow-checked), and the tensors
// must tile the data buffer exactly: sorted, contiguous from 0, no gap, no overlap, ending at the end
// of the file.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"

namespace day0 {

// The reference reader's bound on the JSON header length.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data buffer (byte 8 + header_length of the file)
  uint64_t end = 0;    // exclusive
  uint64_t byte_size() const { return end - begin; }
  uint64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t header_length = 0;       // N, the JSON length
  uint64_t data_start = 0;          // 8 + N
  uint64_t data_size = 0;           // bytes the tensors tile
  uint64_t expected_file_size = 0;  // data_start + end of the last tensor
  bool truncated = false;           // only with allow_truncated_data: the file ends before the data does
  std::vector<SafetensorsEntry> tensors;        // sorted by offset (= file order)
  std::map<std::string, std::string> metadata;  // "__metadata__"

  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;

 private:
  friend Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t>, uint64_t, bool);
  std::map<std::string, size_t, std::less<>> index_;
};

// Reads the 8-byte little-endian header length from the first bytes of a file. Fails when fewer than
// 8 bytes exist, when the length exceeds kMaxSafetensorsHeaderBytes, or when 8 + N passes file_size.
Result<uint64_t> read_safetensors_header_length(std::span<const uint8_t> prefix, uint64_t file_size);

// `file_prefix` holds at least the first 8 + N bytes of a file of `file_size` bytes (an mmap of the
// whole file is fine). Errors: kOutOfRange (absurd length), kDataLoss (length or tensor data past the
// end of the file: truncated), kParseError (malformed JSON or entry), kUnsupported (unknown dtype).
// With allow_truncated_data, tensor data running past the end of the file is not an error: the header
// comes back with `truncated` set (verification reports which tensors are cut).
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> file_prefix, uint64_t file_size,
                                                   bool allow_truncated_data = false);

}  // namespace day0
