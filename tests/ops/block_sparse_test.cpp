// Block-sparse attention: the block indexer (block_indexer_topk) by hand and against the oracle over
// random paged caches, and paged attention restricted to the selected key blocks (per selection group of
// query heads) on every backend, over cache rows wider than the heads (the index key after V).
#include <algorithm>

#include <fmt/format.h>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/runtime/kv_cache.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

// One sequence's cache written into a pool, in its dtype (the oracle's conversion).
struct BlockSparseSeq {
  std::vector<int32_t> table;
  int64_t rows = 0;
};

BlockSparseSeq write_block_sparse_seq(KvBlockPool& pool, ConstMatrix first, ConstMatrix second) {
  BlockSparseSeq s;
  s.rows = first.rows;
  const int64_t bt = pool.options().block_tokens;
  std::vector<int64_t> slots;
  for (int64_t j = 0; j < first.rows; ++j) {
    if (j % bt == 0) s.table.push_back(pool.allocate());
    slots.push_back(static_cast<int64_t>(s.table.back()) * bt + j % bt);
  }
  ref::kv_write({first, second, slots, pool.table()});
  return s;
}

KvPages block_sparse_pages(const KvBlockPool& pool, const BlockSparseSeq& s) {
  KvPages p;
  p.dtype = pool.options().dtype;
  p.block_tokens = pool.options().block_tokens;
  p.first_width = pool.first_width();
  p.second_width = pool.second_width();
  p.first_blocks = pool.first_table();
  p.second_blocks = pool.second_table();
  p.table = s.table;
  p.length = s.rows;
  return p;
}

// One head of 2, blocks of 2, keys at positions 0..5 after 2 value columns: key j = (j, 1), so a query
// (1, 0) scores j and (-1, 0) scores -j. The query at position 5 (block 2, local) keeps, with top-2,
// block 2 and the best of blocks 0 / 1: block 1 (max 3) for (1, 0), block 0 (max 0) for (-1, 0). At
// position 1 only block 0 exists: one entry, then -1. With no local block the query at 5 with (1, 0)
// takes its own block first (max 5), then block 1.
TEST(BlockIndexerTopk, HandWorkedSelection) {
  KvBlockPool pool(2, 2 + 2, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4});
  std::vector<float> first(6 * 2, 0.0f), second;
  for (int j = 0; j < 6; ++j) second.insert(second.end(), {9, 9, static_cast<float>(j), 1});
  const BlockSparseSeq stored =
      write_block_sparse_seq(pool, ConstMatrix(first.data(), 6, 2), ConstMatrix(second.data(), 6, 4));
  for (float sign : {1.0f, -1.0f}) {
    for (int64_t local : {1, 0}) {
      // Rows: the query at position 1 (a sequence of 2 rows' second row) and at 5.
      const std::vector<float> q = {sign, 0, sign, 0};
      const std::vector<PagedSequence> seqs = {{0, 1, 1, block_sparse_pages(pool, stored)},
                                               {1, 1, 5, block_sparse_pages(pool, stored)}};
      std::vector<int32_t> out(4, 7);
      const BlockIndexerTopkArgs a{.q = ConstMatrix(q.data(), 2, 2),
                                   .seqs = seqs,
                                   .selected = MatrixView<int32_t>(out.data(), 2, 2),
                                   .n_heads = 1,
                                   .head_dim = 2,
                                   .key_col0 = 2,
                                   .block_size = 2,
                                   .local_blocks = local};
      std::vector<std::vector<int32_t>> results;
      ref::block_indexer_topk(a);
      results.push_back(out);
      for (auto& nb : backends_under_test()) {
        std::fill(out.begin(), out.end(), 7);
        nb.backend->block_indexer_topk(a);
        results.push_back(out);
      }
      std::vector<int32_t> want = {0, -1, 2, sign > 0 ? 1 : 0};
      if (local == 0 && sign > 0) want = {0, -1, 2, 1};
      if (local == 0 && sign < 0) want = {0, -1, 0, 1};
      for (const auto& r : results) EXPECT_EQ(r, want) << "sign " << sign << " local " << local;
    }
  }
}

// The indexer over random caches: several sequences (lengths that do and do not fill their last block),
// F32 and BF16 rows, block sizes 3 and 8, top-k below and above the blocks a query sees, 0 to 2 local
// blocks: every backend selects exactly the oracle's blocks in its order.
TEST(BlockIndexerTopk, EveryBackendSelectsTheOraclesBlocks) {
  Differential diff;
  const int64_t n_heads = 2, d = 16, col0 = 8;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    for (auto [bs, topk, local] : {std::tuple{3, 2, 1}, std::tuple{3, 4, 2}, std::tuple{8, 1, 0}}) {
      KvBlockPool pool(4, col0 + d, KvCacheOptions{.dtype = dtype, .block_tokens = 5});
      const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 23}, {6, 6}, {4, 17}};  // (T, S)
      std::vector<GuardedMatrix> first, second;
      std::vector<BlockSparseSeq> stored;
      for (auto [t, s] : shapes) {
        first.emplace_back(s, 4);
        second.emplace_back(s, col0 + d);
        second.back().fill_random(static_cast<uint64_t>(s) + 31);
        stored.push_back(write_block_sparse_seq(pool, first.back().cview(), second.back().cview()));
      }
      std::vector<PagedSequence> seqs;
      int64_t rows = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        seqs.push_back(
            {rows, shapes[i].first, shapes[i].second - shapes[i].first, block_sparse_pages(pool, stored[i])});
        rows += shapes[i].first;
      }
      GuardedMatrix q(rows, n_heads * d);
      q.fill_random(41);
      const int64_t width = n_heads * topk;
      diff.check("block_indexer_topk",
                 fmt::format("{} block {} top-{} local {}", kv_dtype_name(dtype), bs, topk, local), rows,
                 width, kTolExact, [&](Backend& be, GuardedMatrix& out) {
                   std::vector<int32_t> ids(static_cast<size_t>(rows * width));
                   be.block_indexer_topk({.q = q.cview(),
                                          .seqs = seqs,
                                          .selected = MatrixView<int32_t>(ids.data(), rows, width),
                                          .n_heads = n_heads,
                                          .head_dim = d,
                                          .key_col0 = col0,
                                          .block_size = bs,
                                          .local_blocks = local});
                   const Matrix o = out.view();
                   for (int64_t r = 0; r < rows; ++r)
                     for (int64_t j = 0; j < width; ++j)
                       o.row(r)[j] = static_cast<float>(ids[static_cast<size_t>(r * width + j)]);
                 });
    }
  }
  diff.finish();
}

// Paged attention with a block selection: 4 query heads over 2 KV heads, selections per KV group (2),
// per head (4) and shared (1), in any order with -1 padding and a repeated entry; rows wider than the
// heads (an index key after V); F32 and BF16 caches; with and without sinks; prefill and decode rows.
// Every backend against the oracle, which drops the keys of unselected blocks from the softmax.
TEST(PagedAttention, BlockSparseMatchesTheOracle) {
  Differential diff;
  const int64_t n_heads = 4, n_kv = 2, d = 16, index_dim = 8, bs = 4, k = 3;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    KvBlockPool pool(n_kv * d, n_kv * d + index_dim, KvCacheOptions{.dtype = dtype, .block_tokens = 8});
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 30}, {5, 5}, {7, 22}};  // (T, S)
    std::vector<GuardedMatrix> keys, values;
    std::vector<BlockSparseSeq> stored;
    for (auto [t, s] : shapes) {
      keys.emplace_back(s, n_kv * d);
      values.emplace_back(s, n_kv * d + index_dim);
      keys.back().fill_random(static_cast<uint64_t>(s) + 5);
      values.back().fill_random(static_cast<uint64_t>(s) + 6);
      stored.push_back(write_block_sparse_seq(pool, keys.back().cview(), values.back().cview()));
    }
    std::vector<PagedSequence> seqs;
    int64_t rows = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      seqs.push_back(
          {rows, shapes[i].first, shapes[i].second - shapes[i].first, block_sparse_pages(pool, stored[i])});
      rows += shapes[i].first;
    }
    GuardedMatrix q(rows, n_heads * d);
    q.fill_random(23, 0.7f);
    const std::vector<float> sinks = {0.5f, -1.0f, 0.0f, 2.0f};
    for (int64_t groups : {2, 4, 1}) {
      // Row r, group g: blocks it can see, spread out, -1 past them, its own block last (a repeat in some).
      std::vector<int32_t> selected;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [t, s] = shapes[i];
        for (int64_t r = 0; r < t; ++r) {
          const int64_t visible_blocks = (s - t + r) / bs + 1;
          for (int64_t g = 0; g < groups; ++g) {
            for (int64_t j = 0; j < k; ++j) {
              const int64_t b = (visible_blocks - 1 - 2 * j - g + 4 * visible_blocks) % visible_blocks;
              selected.push_back(j + 1 < k && j < visible_blocks ? static_cast<int32_t>(b)
                                 : j + 1 == k                    ? static_cast<int32_t>(visible_blocks - 1)
                                                                 : -1);
            }
          }
        }
      }
      const BlockSelection sel{MatrixView<const int32_t>(selected.data(), rows, groups * k), bs, groups};
      for (bool with_sinks : {false, true}) {
        diff.check("paged_attention",
                   fmt::format("block-sparse {} groups {}{}", kv_dtype_name(dtype), groups,
                               with_sinks ? " sinks" : ""),
                   rows, n_heads * d, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
                     be.paged_attention(
                         {.q = q.cview(),
                          .seqs = seqs,
                          .out = out.view(),
                          .n_heads = n_heads,
                          .n_kv_heads = n_kv,
                          .head_dim = d,
                          .scale = 0.3f,
                          .sinks = with_sinks ? std::span<const float>(sinks) : std::span<const float>(),
                          .selection = sel});
                   });
      }
    }
  }
  diff.finish();
}

// The selection changes the result: with one block selected, a query whose scores are all equal (q = 0)
// returns the mean of that block's visible values, on every backend, for the paged and the contiguous
// kernel alike; with every block selected it is the dense result.
TEST(PagedAttention, BlockSparseOneBlockAveragesItsValues) {
  const int64_t d = 2, bs = 2;
  KvBlockPool pool(d, d, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4});
  const std::vector<float> k(6 * d, 1.0f);
  const std::vector<float> v = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};  // keys 0..5
  const BlockSparseSeq stored =
      write_block_sparse_seq(pool, ConstMatrix(k.data(), 6, d), ConstMatrix(v.data(), 6, d));
  const std::vector<PagedSequence> seqs = {{0, 1, 5, block_sparse_pages(pool, stored)}};
  const std::vector<float> q(d, 0.0f);
  const std::vector<int32_t> one = {1, -1}, all = {2, 0, 1};
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(reference_backend());
  for (auto& nb : backends_under_test()) backends.push_back(std::move(nb.backend));
  for (auto& be : backends) {
    std::vector<float> out(d);
    PagedAttentionArgs a{.q = ConstMatrix(q.data(), 1, d),
                         .seqs = seqs,
                         .out = Matrix(out.data(), 1, d),
                         .n_heads = 1,
                         .n_kv_heads = 1,
                         .head_dim = d,
                         .selection = {MatrixView<const int32_t>(one.data(), 1, 2), bs, 1}};
    be->paged_attention(a);
    EXPECT_FLOAT_EQ(out[0], 3.5f) << be->name();  // keys 2 and 3
    EXPECT_FLOAT_EQ(out[1], 35.0f) << be->name();
    a.selection = {MatrixView<const int32_t>(all.data(), 1, 3), bs, 1};
    be->paged_attention(a);
    EXPECT_NEAR(out[0], 3.5f, 1e-6) << be->name();  // keys 0..5
    std::vector<float> contiguous(d);
    be->attention({.q = ConstMatrix(q.data(), 1, d),
                   .k = ConstMatrix(k.data(), 6, d),
                   .v = ConstMatrix(v.data(), 6, d),
                   .out = Matrix(contiguous.data(), 1, d),
                   .n_heads = 1,
                   .n_kv_heads = 1,
                   .head_dim = d,
                   .q_pos0 = 5,
                   .selection = {MatrixView<const int32_t>(one.data(), 1, 2), bs, 1}});
    EXPECT_FLOAT_EQ(contiguous[0], 3.5f) << be->name();
    EXPECT_FLOAT_EQ(contiguous[1], 35.0f) << be->name();
  }
}

}  // namespace
}  // namespace day0::test
