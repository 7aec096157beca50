// Reference KV cache writes: one element at a time through the scalar conversions of core/numeric.h,
// the oracle the optimised kernels are compared with bit for bit.
#include <cstring>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/numeric.h"
#include "day0/io/quantize.h"
#include "day0/ops/kernel_checks.h"

namespace day0::ref {
namespace {

// Element j of a row in the pool's dtype at `dst`.
void store(KvDtype dtype, float value, unsigned char* dst, int64_t j) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst + j * 4, &value, 4);
      return;
    case KvDtype::kBF16: {
      const uint16_t bits = f32_to_bf16(value);
      std::memcpy(dst + j * 2, &bits, 2);
      return;
    }
    case KvDtype::kFp8E4M3:
      dst[j] = f32_to_f8e4m3(value);
      return;
  }
}

void write_row(const KvBlockTable& p, void* const* blocks, int64_t width, int64_t slot, const float* row) {
  auto* base = static_cast<unsigned char*>(blocks[slot / p.block_tokens]) +
               (slot % p.block_tokens) * width * kv_dtype_bytes(p.dtype);
  for (int64_t j = 0; j < width; ++j) store(p.dtype, row[j], base, j);
}

}  // namespace

void kv_write(const KvWriteArgs& a) {
  check_args(a);
  for (size_t r = 0; r < a.slots.size(); ++r) {
    const auto row = static_cast<int64_t>(r);
    write_row(a.pool, a.pool.first_blocks, a.pool.first_width, a.slots[r], a.first.row(row));
    write_row(a.pool, a.pool.second_blocks, a.pool.second_width, a.slots[r], a.second.row(row));
  }
}

void kv_copy_blocks(const KvCopyBlocksArgs& a) {
  check_args(a);
  const int64_t elem = kv_dtype_bytes(a.pool.dtype);
  for (size_t i = 0; i < a.src.size(); ++i) {
    for (auto [blocks, width] : {std::pair{a.pool.first_blocks, a.pool.first_width},
                                 std::pair{a.pool.second_blocks, a.pool.second_width}}) {
      const auto* from = static_cast<const unsigned char*>(blocks[a.src[i]]);
      auto* to = static_cast<unsigned char*>(blocks[a.dst[i]]);
      for (int64_t b = 0; b < a.rows[i] * width * elem; ++b) to[b] = from[b];
    }
  }
}

}  // namespace day0::ref
