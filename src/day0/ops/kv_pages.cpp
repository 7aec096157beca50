#include "day0/ops/kv_pages.h"

#include <array>
#include <cmath>
#include <cstring>

#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/io/quantize.h"

namespace day0 {

void kv_row_to_f32(KvDtype dtype, const void* row, int64_t n, float* out) {
  if (n == 0) return;  // a cache without a second tensor (shared K=V) has no row to point at
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvDtype::kBF16: {
      const auto* p = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case KvDtype::kFp8E4M3: {
      static const auto table = [] {
        std::array<float, 256> t{};
        for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = f8e4m3_to_f32(static_cast<uint8_t>(b));
        return t;
      }();
      const auto* p = static_cast<const uint8_t*>(row);
      for (int64_t i = 0; i < n; ++i) out[i] = table[p[i]];
      return;
    }
  }
}

void kv_row_from_f32(KvDtype dtype, const float* row, int64_t n, void* dst) {
  if (n == 0) return;
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, row, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvDtype::kBF16: {
      auto* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(row[i]);
      return;
    }
    case KvDtype::kFp8E4M3: {
      auto* p = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f8e4m3(row[i]);
      return;
    }
  }
}

void gather_kv_pages(const KvPages& kv, std::vector<float>& first, std::vector<float>& second) {
  D0_CHECK_MSG(kv.length == 0 || kv.block_tokens > 0, "KV pages: block_tokens must be positive");
  D0_CHECK_MSG(kv.length <= static_cast<int64_t>(kv.table.size()) * kv.block_tokens,
               "KV pages: length past the block table");
  first.resize(static_cast<size_t>(kv.length * kv.first_width));
  second.resize(static_cast<size_t>(kv.length * kv.second_width));
  for (int64_t j = 0; j < kv.length; ++j) {
    kv_row_to_f32(kv.dtype, kv.first_row(j), kv.first_width, first.data() + j * kv.first_width);
    kv_row_to_f32(kv.dtype, kv.second_row(j), kv.second_width, second.data() + j * kv.second_width);
  }
}

KvPages ContiguousKv::pages(const float* first, const float* second, int64_t rows, int64_t first_width,
                            int64_t second_width, int64_t pos0) {
  first_block = first;
  second_block = second;
  id = 0;
  KvPages p;
  p.dtype = KvDtype::kF32;
  p.block_tokens = rows > 0 ? rows : 1;
  p.first_width = first_width;
  p.second_width = second_width;
  p.first_blocks = &first_block;
  p.second_blocks = &second_block;
  p.table = std::span<const int32_t>(&id, 1);
  p.pos0 = pos0;
  p.length = rows;
  return p;
}

}  // namespace day0
