#pragma once
// Sparse attention's key selection as the attention kernels apply it: row t of an
// indexer_topk output lists the key indices query t may attend to (-1 entries unused); an empty
// selection (rows == 0) admits every key. Block-sparse attention's selection (a block_indexer_topk
// output) lists key blocks per group of query heads instead.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "day0/ops/kernel_args.h"
#include "day0/ops/tensor.h"

namespace day0 {

// keep[j] (j < n_keys): whether query row t of `selected` admits key j.
inline void selected_keys(MatrixView<const int32_t> selected, int64_t t, int64_t n_keys,
                          std::vector<char>& keep) {
  keep.assign(static_cast<size_t>(n_keys), selected.rows == 0 ? 1 : 0);
  if (selected.rows == 0) return;
  const int32_t* row = selected.row(t);
  for (int64_t i = 0; i < selected.cols; ++i) {
    if (row[i] >= 0 && row[i] < n_keys) keep[static_cast<size_t>(row[i])] = 1;
  }
}

// The keys query row t attends to among its first n_keys, ascending, into `keys` (`keep` is scratch);
// the kernels call it only for a non-empty selection, so a dense decode step allocates nothing.
inline void selected_key_list(MatrixView<const int32_t> selected, int64_t t, int64_t n_keys,
                              std::vector<char>& keep, std::vector<int64_t>& keys) {
  selected_keys(selected, t, n_keys, keep);
  keys.clear();
  for (int64_t j = 0; j < n_keys; ++j)
    if (keep[static_cast<size_t>(j)]) keys.push_back(j);
}

// The blocks query head h (of n_heads) of row t attends to under a block-sparse selection: its group's
// valid entries, ascending, each once, into `blocks`.
inline void selected_block_list(const BlockSelection& sel, int64_t t, int64_t h, int64_t n_heads,
                                std::vector<int64_t>& blocks) {
  blocks.clear();
  const int64_t k = sel.k();
  const int64_t g = h / (n_heads / sel.groups);
  const int32_t* row = sel.blocks.row(t) + g * k;
  for (int64_t i = 0; i < k; ++i)
    if (row[i] >= 0) blocks.push_back(row[i]);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
}

}  // namespace day0
