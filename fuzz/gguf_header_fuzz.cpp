// libFuzzer target: arbitrary bytes as a whole GGUF file. The reader must never crash, and what it
// accepts must satisfy what readers rely on: every tensor's data inside the file, aligned, sized as its
// type says, no two overlapping; small accepted tensors are dequantised too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "day0/io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto file = day0::gguf::GgufFile::parse(bytes, "fuzz.gguf");
  if (!file.is_ok()) return 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& t : file->tensors()) {
    const auto info = day0::gguf::ggml_type_info(t.type);
    if (!info) __builtin_trap();
    if (t.offset < file->data_offset() || (t.offset - file->data_offset()) % file->alignment() != 0)
      __builtin_trap();
    if (t.offset > size || t.bytes > size - t.offset) __builtin_trap();
    if (t.data.data() != data + t.offset || t.data.size() != t.bytes) __builtin_trap();
    if (t.n_elements / static_cast<uint64_t>(info->block_elems) * static_cast<uint64_t>(info->block_bytes) !=
        t.bytes)
      __builtin_trap();
    if (file->find_tensor(t.name) != &t) __builtin_trap();
    ranges.emplace_back(t.offset, t.offset + t.bytes);
    if (info->dequantizable && t.n_elements <= (1u << 16)) {
      auto values = day0::gguf::dequantize_tensor(t);
      if (!values.is_ok() || values->size() != t.n_elements) __builtin_trap();
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i - 1].second > ranges[i].first) __builtin_trap();
  }
  for (const auto& [key, v] : file->metadata()) {
    if (v.type == day0::gguf::ValueType::kArray && v.elem_type == day0::gguf::ValueType::kString &&
        v.strings.size() != v.count)
      __builtin_trap();
  }
  return 0;
}
