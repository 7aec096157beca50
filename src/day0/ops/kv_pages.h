#pragma once
// The paged view of one sequence's KV cache for one layer, as attention kernels read it. Keys are
// stored in fixed-size blocks of `block_tokens` token rows; a block holds its `first` rows
// [block_tokens, first_width] and its `second` rows [block_tokens, second_width] (GQA: K and V after
// RoPE, n_kv_heads * head_dim wide; MLA: the normed latent c_kv and the roped shared key k_pe) in
// `dtype`. `table` lists the sequence's blocks oldest first; row 0 of table[0] holds position `pos0`
// (> 0 when a sliding or chunked layer has dropped blocks that fell out of its window) and `length`
// rows from there are valid.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/model/kv_dtype.h"
#include "day0/ops/tensor.h"

namespace day0 {

struct KvPages {
  KvDtype dtype = KvDtype::kF32;
  int64_t block_tokens = 0;
  int64_t first_width = 0;
  int64_t second_width = 0;
  const void* const* first_blocks = nullptr;   // by block id: [block_tokens, first_width] of dtype
  const void* const* second_blocks = nullptr;  // by block id: [block_tokens, second_width] of dtype
  std::span<const int32_t> table;              // block ids, in position order
  int64_t pos0 = 0;                            // position of row 0 of table[0]
  int64_t length = 0;                          // rows held: positions pos0 .. pos0 + length - 1

  // Row j (0 <= j < length, counted from pos0) of the first / second tensor, in dtype.
  const void* first_row(int64_t j) const { return row_of(first_blocks, first_width, j); }
  const void* second_row(int64_t j) const { return row_of(second_blocks, second_width, j); }

 private:
  const void* row_of(const void* const* blocks, int64_t width, int64_t j) const {
    const int32_t block = table[static_cast<size_t>(j / block_tokens)];
    const auto* base = static_cast<const unsigned char*>(blocks[block]);
    return base + (j % block_tokens) * width * kv_dtype_bytes(dtype);
  }
};

// The whole block pool as the KV kernels write it (kv_write, kv_copy_blocks): block id -> its
// `first` rows [block_tokens, first_width] and `second` rows [block_tokens, second_width] in dtype.
// A token slot is block * block_tokens + row within the block.
struct KvBlockTable {
  KvDtype dtype = KvDtype::kF32;
  int64_t block_tokens = 0;
  int64_t first_width = 0;
  int64_t second_width = 0;
  void* const* first_blocks = nullptr;   // [n_blocks]
  void* const* second_blocks = nullptr;  // [n_blocks]
  int64_t n_blocks = 0;
  MemorySpace space = MemorySpace::kHost;
};

// out[i] = float(row[i]), i < n, for a row stored in `dtype`.
void kv_row_to_f32(KvDtype dtype, const void* row, int64_t n, float* out);
// dst[i] = row[i] stored in `dtype` (BF16: round to nearest even; FP8: round to nearest even,
// saturating at +-448, NaN stays NaN).
void kv_row_from_f32(KvDtype dtype, const float* row, int64_t n, void* dst);

// Every held row dequantised to contiguous float32: first [length, first_width], second
// [length, second_width] (the contiguous form the oracle kernels take).
void gather_kv_pages(const KvPages& kv, std::vector<float>& first, std::vector<float>& second);

// A contiguous float32 cache [rows, width] x 2 viewed as one page (tests, decompositions).
struct ContiguousKv {
  const void* first_block = nullptr;
  const void* second_block = nullptr;
  int32_t id = 0;
  KvPages pages(const float* first, const float* second, int64_t rows, int64_t first_width,
                int64_t second_width, int64_t pos0 = 0);
};

}  // namespace day0
