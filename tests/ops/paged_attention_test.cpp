// Paged attention against the contiguous oracle: every mask and head layout, every KV dtype, block
// sizes that do and do not divide the lengths, several sequences of different lengths in one call,
// and the cpu kernel's key splits (flash-decoding) on long single-sequence decodes.
#include <cmath>

#include <fmt/format.h>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/numeric.h"
#include "day0/io/quantize.h"
#include "day0/runtime/kv_cache.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

// One sequence's cache written into a pool, in its dtype.
struct PagedSeq {
  std::vector<int32_t> table;
  int64_t pos0 = 0;
  int64_t rows = 0;
};

PagedSeq write_pages(KvBlockPool& pool, ConstMatrix first, ConstMatrix second, int64_t pos0) {
  PagedSeq s;
  s.pos0 = pos0;
  s.rows = first.rows;
  const int64_t bt = pool.options().block_tokens;
  std::vector<int64_t> slots;
  for (int64_t j = 0; j < first.rows; ++j) {
    if (j % bt == 0) s.table.push_back(pool.allocate());
    slots.push_back(static_cast<int64_t>(s.table.back()) * bt + j % bt);
  }
  ref::kv_write({first, second, slots, pool.table()});  // the oracle's conversion
  return s;
}

KvPages pages_of(const KvBlockPool& pool, const PagedSeq& s) {
  KvPages p;
  p.dtype = pool.options().dtype;
  p.block_tokens = pool.options().block_tokens;
  p.first_width = pool.first_width();
  p.second_width = pool.second_width();
  p.first_blocks = pool.first_table();
  p.second_blocks = pool.second_table();
  p.table = s.table;
  p.pos0 = s.pos0;
  p.length = s.rows;
  return p;
}

struct SeqShape {
  int64_t t, s, q_pos0, k_pos0;
};
struct PagedCase {
  const char* name;
  std::vector<SeqShape> seqs;
  int64_t n_heads, n_kv, d, dv;
  AttentionMask mask;
  int64_t window;
  bool sinks;
};

const PagedCase kCases[] = {
    {"decode causal GQA", {{1, 300, 299, 0}}, 8, 2, 64, 64, AttentionMask::kCausal, 0, false},
    {"long decode (key splits)", {{1, 2100, 2099, 0}}, 4, 1, 64, 64, AttentionMask::kCausal, 0, false},
    {"prefill causal MHA", {{37, 37, 0, 0}}, 4, 4, 40, 40, AttentionMask::kCausal, 0, false},
    {"chunk after cache", {{5, 25, 20, 0}}, 6, 3, 32, 32, AttentionMask::kCausal, 0, false},
    {"sliding window 16", {{9, 40, 31, 0}}, 4, 2, 64, 64, AttentionMask::kSliding, 16, false},
    {"sliding + sinks (gpt-oss)", {{7, 150, 143, 0}}, 8, 2, 64, 64, AttentionMask::kSliding, 128, true},
    {"full + sinks decode", {{1, 200, 199, 0}}, 4, 1, 64, 64, AttentionMask::kCausal, 0, true},
    {"chunked 8 (llama4)", {{12, 30, 18, 0}}, 4, 2, 16, 16, AttentionMask::kChunked, 8, false},
    {"dropped blocks k_pos0=32", {{3, 16, 45, 32}}, 2, 1, 24, 24, AttentionMask::kSliding, 16, false},
    {"dqk 192 dv 128", {{3, 19, 16, 0}}, 2, 2, 192, 128, AttentionMask::kCausal, 0, false},
    {"batch: prefill + decodes of different lengths",
     {{6, 6, 0, 0}, {1, 90, 89, 0}, {1, 7, 6, 0}, {4, 50, 46, 0}},
     8,
     2,
     32,
     32,
     AttentionMask::kCausal,
     0,
     false},
    {"batch sliding + sinks",
     {{1, 70, 69, 0}, {3, 20, 17, 0}},
     4,
     2,
     32,
     32,
     AttentionMask::kSliding,
     24,
     true},
};

struct Built {
  std::unique_ptr<KvBlockPool> pool;
  std::vector<PagedSeq> stored;
  std::vector<PagedSequence> seqs;
  std::vector<GuardedMatrix> k, v;  // original float32 values
  int64_t total_rows = 0;
};

Built build(const PagedCase& c, KvDtype dtype, int64_t block_tokens, uint64_t seed) {
  Built b;
  b.pool = std::make_unique<KvBlockPool>(c.n_kv * c.d, c.n_kv * c.dv,
                                         KvCacheOptions{.dtype = dtype, .block_tokens = block_tokens});
  for (const SeqShape& s : c.seqs) {
    b.k.emplace_back(s.s, c.n_kv * c.d);
    b.v.emplace_back(s.s, c.n_kv * c.dv);
    b.k.back().fill_random(++seed, 0.5f);
    b.v.back().fill_random(++seed);
  }
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    b.stored.push_back(write_pages(*b.pool, b.k[i].cview(), b.v[i].cview(), c.seqs[i].k_pos0));
  }
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    b.seqs.push_back({b.total_rows, c.seqs[i].t, c.seqs[i].q_pos0, pages_of(*b.pool, b.stored[i])});
    b.total_rows += c.seqs[i].t;
  }
  return b;
}

TEST(PagedAttention, EveryBackendAndSimdLevelMatchesTheContiguousOracle) {
  Differential diff;
  for (const auto& c : kCases) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
      for (int64_t bt : {int64_t{16}, int64_t{7}}) {
        Built b = build(c, dtype, bt, 10);
        GuardedMatrix q(b.total_rows, c.n_heads * c.d);
        q.fill_random(1, 0.5f);
        const auto sinks = random_vector(c.n_heads, 4, 2.0f);
        const std::string name = fmt::format("{} {} block {}", c.name, kv_dtype_name(dtype), bt);
        // Everyone reads the same stored values: float32 accuracy whatever the dtype.
        diff.check("paged_attention", name, b.total_rows, c.n_heads * c.dv, kTolFloat,
                   [&](Backend& be, GuardedMatrix& out) {
                     be.paged_attention(
                         {.q = q.cview(),
                          .seqs = b.seqs,
                          .out = out.view(),
                          .n_heads = c.n_heads,
                          .n_kv_heads = c.n_kv,
                          .head_dim = c.d,
                          .v_head_dim = c.dv,
                          .mask = c.mask,
                          .window = c.window,
                          .sinks = c.sinks ? std::span<const float>(sinks) : std::span<const float>()});
                   });
      }
    }
  }
  diff.finish();
}

// A query row's output has the same bits however the prompt is cut into calls (the rows of a tile share
// its lanes on the cpu backend): the whole prompt at once, its last rows as a chunk after the others
// (chunked prefill, a prefix-cache hit), its last row as a decode step. Every SIMD level; causal, where
// the key spans do not depend on the chunk.
TEST(PagedAttention, RowsHaveTheBitsOfAnyChunking) {
  const PagedCase c{"chunks", {{45, 45, 0, 0}}, 8, 2, 64, 64, AttentionMask::kCausal, 0, false};
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF32}) {
    Built b = build(c, dtype, 16, 60);
    GuardedMatrix q(45, c.n_heads * c.d);
    q.fill_random(61, 0.5f);
    for (SimdLevel level : available_simd_levels()) {
      BackendOptions opts;
      opts.n_threads = 2;
      opts.simd = level;
      auto be = std::move(make_backend("cpu", opts).value());
      const auto run = [&](int64_t first) {
        GuardedMatrix out(45 - first, c.n_heads * c.dv);
        const PagedSequence seq{0, 45 - first, first, b.seqs[0].kv};
        be->paged_attention({.q = q.cview().row_slice(first, 45 - first),
                             .seqs = std::span(&seq, 1),
                             .out = out.view(),
                             .n_heads = c.n_heads,
                             .n_kv_heads = c.n_kv,
                             .head_dim = c.d});
        return out.values();
      };
      const auto whole = run(0);
      for (int64_t first : {int64_t{13}, int64_t{44}}) {
        const auto part = run(first);
        ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + first * c.n_heads * c.dv))
            << simd_level_name(level) << " " << kv_dtype_name(dtype) << " rows from " << first;
      }
    }
  }
}

// The stored dtype costs what its rounding costs: paged BF16 / FP8 against contiguous float32 keys.
TEST(PagedAttention, KvDtypesStayWithinTheirTolerance) {
  auto ref = reference_backend();
  for (const auto& c : kCases) {
    for (auto [dtype, tol] : {std::pair{KvDtype::kF32, 1e-12}, std::pair{KvDtype::kBF16, 1e-4},
                              std::pair{KvDtype::kFp8E4M3, 3e-2}}) {
      Built b = build(c, dtype, 16, 20);
      GuardedMatrix q(b.total_rows, c.n_heads * c.d);
      q.fill_random(2, 0.5f);
      const auto sinks = random_vector(c.n_heads, 4, 2.0f);
      const std::span<const float> sk = c.sinks ? std::span<const float>(sinks) : std::span<const float>();
      GuardedMatrix paged(b.total_rows, c.n_heads * c.dv), contiguous(b.total_rows, c.n_heads * c.dv);
      ref->paged_attention({.q = q.cview(),
                            .seqs = b.seqs,
                            .out = paged.view(),
                            .n_heads = c.n_heads,
                            .n_kv_heads = c.n_kv,
                            .head_dim = c.d,
                            .v_head_dim = c.dv,
                            .mask = c.mask,
                            .window = c.window,
                            .sinks = sk});
      int64_t row0 = 0;
      for (size_t i = 0; i < c.seqs.size(); ++i) {
        const SeqShape& s = c.seqs[i];
        ref->attention({.q = q.cview().row_slice(row0, s.t),
                        .k = b.k[i].cview(),
                        .v = b.v[i].cview(),
                        .out = contiguous.view().row_slice(row0, s.t),
                        .n_heads = c.n_heads,
                        .n_kv_heads = c.n_kv,
                        .head_dim = c.d,
                        .v_head_dim = c.dv,
                        .q_pos0 = s.q_pos0,
                        .k_pos0 = s.k_pos0,
                        .mask = c.mask,
                        .window = c.window,
                        .sinks = sk});
        row0 += s.t;
      }
      const double e = nmse(paged.values(), contiguous.values());
      EXPECT_LE(e, tol) << c.name << " " << kv_dtype_name(dtype);
      if (dtype != KvDtype::kF32) {
        EXPECT_GT(e, 0.0) << c.name << ": the dtype must round something";
      }
    }
  }
}

// A pool shared by layers with different KV head counts has rows for the widest: a layer with fewer
// heads reads its first columns (sliding layers with twice the full layers' KV heads, values narrower
// than keys). Every backend against the contiguous oracle on those columns.
TEST(PagedAttention, RowsWiderThanTheLayersHeads) {
  Differential diff;
  auto ref = reference_backend();
  const int64_t n_heads = 4, n_kv = 2, pool_kv = 4, d = 24, dv = 16, s_len = 21, t = 5;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    for (bool sliding : {false, true}) {
      KvBlockPool pool(pool_kv * d, pool_kv * dv, KvCacheOptions{.dtype = dtype, .block_tokens = 8});
      GuardedMatrix k(s_len, pool_kv * d), v(s_len, pool_kv * dv);
      k.fill_random(31, 0.5f);
      v.fill_random(32);
      const PagedSeq stored = write_pages(pool, k.cview(), v.cview(), 0);
      const PagedSequence seq{0, t, s_len - t, pages_of(pool, stored)};
      GuardedMatrix q(t, n_heads * d);
      q.fill_random(33, 0.5f);
      const AttentionMask mask = sliding ? AttentionMask::kSliding : AttentionMask::kCausal;
      const PagedAttentionArgs args{.q = q.cview(),
                                    .seqs = std::span(&seq, 1),
                                    .n_heads = n_heads,
                                    .n_kv_heads = n_kv,
                                    .head_dim = d,
                                    .v_head_dim = dv,
                                    .mask = mask,
                                    .window = sliding ? 9 : 0};
      const std::string name = fmt::format("{} {}", kv_dtype_name(dtype), sliding ? "sliding" : "causal");
      diff.check("paged_attention", "rows wider than the heads " + name, t, n_heads * dv, kTolFloat,
                 [&](Backend& be, GuardedMatrix& out) {
                   PagedAttentionArgs a = args;
                   a.out = out.view();
                   be.paged_attention(a);
                 });
      if (dtype != KvDtype::kF32) continue;
      GuardedMatrix paged(t, n_heads * dv), contiguous(t, n_heads * dv);
      PagedAttentionArgs a = args;
      a.out = paged.view();
      ref->paged_attention(a);
      ref->attention({.q = q.cview(),
                      .k = k.cview().col_slice(0, n_kv * d),
                      .v = v.cview().col_slice(0, n_kv * dv),
                      .out = contiguous.view(),
                      .n_heads = n_heads,
                      .n_kv_heads = n_kv,
                      .head_dim = d,
                      .v_head_dim = dv,
                      .q_pos0 = s_len - t,
                      .mask = mask,
                      .window = sliding ? 9 : 0});
      EXPECT_LE(nmse(paged.values(), contiguous.values()), 1e-12) << name;
    }
  }
  diff.finish();
}

TEST(PagedAttention, MlaOverPagesMatchesTheOracleInBothForms) {
  Differential diff;
  const int64_t n_heads = 4, d_nope = 16, d_rope = 8, d_v = 12, rank = 32;
  const TestWeight w = random_weight(WeightFormat::kBF16, n_heads * (d_nope + d_v), rank, 11, 0.3f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    KvBlockPool pool(rank, d_rope, KvCacheOptions{.dtype = dtype, .block_tokens = 8});
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 20}, {5, 5}, {3, 40}};  // (T, S)
    std::vector<GuardedMatrix> ckv, kpe;
    std::vector<PagedSeq> stored;
    for (auto [t, s] : shapes) {
      ckv.emplace_back(s, rank);
      kpe.emplace_back(s, d_rope);
      ckv.back().fill_random(static_cast<uint64_t>(s) + 1);
      kpe.back().fill_random(static_cast<uint64_t>(s) + 2);
      stored.push_back(write_pages(pool, ckv.back().cview(), kpe.back().cview(), 0));
    }
    std::vector<PagedSequence> seqs;
    int64_t rows = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      seqs.push_back({rows, shapes[i].first, shapes[i].second - shapes[i].first, pages_of(pool, stored[i])});
      rows += shapes[i].first;
    }
    GuardedMatrix q(rows, n_heads * (d_nope + d_rope));
    q.fill_random(21, 0.5f);
    for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
      const std::string name =
          fmt::format("{} {}", kv_dtype_name(dtype), form == MlaForm::kNaive ? "naive" : "absorbed");
      diff.check("paged_mla_attention", name, rows, n_heads * d_v, kTolFloat,
                 [&](Backend& be, GuardedMatrix& out) {
                   be.paged_mla_attention({.q = q.cview(),
                                           .seqs = seqs,
                                           .w_kv_b = w.view(),
                                           .out = out.view(),
                                           .n_heads = n_heads,
                                           .d_nope = d_nope,
                                           .d_rope = d_rope,
                                           .d_v = d_v,
                                           .kv_lora_rank = rank,
                                           .scale = 0.2f,
                                           .form = form});
                 });
    }
  }
  diff.finish();
}

// DeepSeek Sparse Attention: MLA over cache rows wider than k_pe (the indexer key follows it) with a
// per-query key selection (-1 padded, in any order), both forms, every KV dtype: every backend
// against the oracle, which drops the unselected keys from the softmax.
TEST(PagedAttention, SparseMlaOverWiderRowsMatchesTheOracleInBothForms) {
  Differential diff;
  const int64_t n_heads = 4, d_nope = 16, d_rope = 8, d_v = 12, rank = 32, index_dim = 16, k = 3;
  const TestWeight w = random_weight(WeightFormat::kBF16, n_heads * (d_nope + d_v), rank, 13, 0.3f);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    KvBlockPool pool(rank, d_rope + index_dim, KvCacheOptions{.dtype = dtype, .block_tokens = 8});
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 20}, {5, 5}, {3, 40}};  // (T, S)
    std::vector<GuardedMatrix> ckv, second;
    std::vector<PagedSeq> stored;
    for (auto [t, s] : shapes) {
      ckv.emplace_back(s, rank);
      second.emplace_back(s, d_rope + index_dim);
      ckv.back().fill_random(static_cast<uint64_t>(s) + 5);
      second.back().fill_random(static_cast<uint64_t>(s) + 6);
      stored.push_back(write_pages(pool, ckv.back().cview(), second.back().cview(), 0));
    }
    std::vector<PagedSequence> seqs;
    std::vector<int32_t> selected;  // [rows, k]: a spread of keys each row can see, -1 padded
    int64_t rows = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [t, s] = shapes[i];
      seqs.push_back({rows, t, s - t, pages_of(pool, stored[i])});
      for (int64_t r = 0; r < t; ++r) {
        const int64_t visible = s - t + r + 1;
        for (int64_t j = 0; j < k; ++j) {
          selected.push_back(j < visible ? static_cast<int32_t>((visible - 1 - 3 * j + visible) % visible)
                                         : -1);
        }
      }
      rows += t;
    }
    GuardedMatrix q(rows, n_heads * (d_nope + d_rope));
    q.fill_random(23, 0.5f);
    for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
      const std::string name =
          fmt::format("sparse {} {}", kv_dtype_name(dtype), form == MlaForm::kNaive ? "naive" : "absorbed");
      diff.check("paged_mla_attention", name, rows, n_heads * d_v, kTolFloat,
                 [&](Backend& be, GuardedMatrix& out) {
                   be.paged_mla_attention({.q = q.cview(),
                                           .seqs = seqs,
                                           .w_kv_b = w.view(),
                                           .out = out.view(),
                                           .n_heads = n_heads,
                                           .d_nope = d_nope,
                                           .d_rope = d_rope,
                                           .d_v = d_v,
                                           .kv_lora_rank = rank,
                                           .scale = 0.2f,
                                           .form = form,
                                           .selected = MatrixView<const int32_t>(selected.data(), rows, k)});
                 });
    }
  }
  diff.finish();
}

// The selection changes the result: the oracle with one key selected per query equals plain
// attention over that key alone (its value row), and differs from dense MLA.
TEST(PagedAttention, SparseMlaWithOneSelectedKeyReturnsThatKeysValue) {
  const int64_t n_heads = 1, d_nope = 2, d_rope = 2, d_v = 2, rank = 2;
  // kv_b = identity blocks: k_nope = c_kv, v = c_kv.
  const std::vector<float> kv_b = {1, 0, 0, 1, 1, 0, 0, 1};  // [n_heads * (d_nope + d_v), rank]
  const WeightView wv{.format = WeightFormat::kF32, .rows = 4, .cols = 2, .data = kv_b.data()};
  KvBlockPool pool(rank, d_rope, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4});
  const std::vector<float> c_kv = {1, 2, 3, 4, 5, 6};  // keys 0, 1, 2
  const std::vector<float> k_pe = {0, 0, 0, 0, 0, 0};
  const PagedSeq stored =
      write_pages(pool, ConstMatrix(c_kv.data(), 3, 2), ConstMatrix(k_pe.data(), 3, 2), 0);
  const std::vector<PagedSequence> seqs = {{0, 1, 2, pages_of(pool, stored)}};
  const std::vector<float> q = {0.1f, 0.1f, 0, 0};
  std::vector<float> sparse(2), dense(2);
  const std::vector<int32_t> one = {1};
  PagedMlaArgs a{.q = ConstMatrix(q.data(), 1, 4),
                 .seqs = seqs,
                 .w_kv_b = wv,
                 .out = Matrix(sparse.data(), 1, 2),
                 .n_heads = n_heads,
                 .d_nope = d_nope,
                 .d_rope = d_rope,
                 .d_v = d_v,
                 .kv_lora_rank = rank,
                 .scale = 1.0f,
                 .form = MlaForm::kAbsorbed,
                 .selected = MatrixView<const int32_t>(one.data(), 1, 1)};
  ref::paged_mla_attention(a);
  EXPECT_FLOAT_EQ(sparse[0], 3.0f);
  EXPECT_FLOAT_EQ(sparse[1], 4.0f);
  a.selected = {};
  a.out = Matrix(dense.data(), 1, 2);
  ref::paged_mla_attention(a);
  EXPECT_GT(dense[0], 3.0f);  // keys 0..2 weighted towards the larger dot products
}

// The lightning indexer by hand: one head, keys (1, 0), (0, 1), (1, 1) at positions 0..2, query
// (2, 1) -> dots 2, 1, 3; weight +1 picks the largest, weight -1 the smallest (relu before the
// weight), causality limits what a query sees, and the tail is -1.
TEST(IndexerTopk, HandWorkedSelection) {
  KvBlockPool pool(1, 2 + 2, KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 2});
  // second tensor rows: 2 columns before the key (k_pe), then the key.
  const std::vector<float> first = {0, 0, 0};
  const std::vector<float> second = {9, 9, 1, 0, 9, 9, 0, 1, 9, 9, 1, 1};
  const PagedSeq stored =
      write_pages(pool, ConstMatrix(first.data(), 3, 1), ConstMatrix(second.data(), 3, 4), 0);
  const std::vector<float> q = {2, 1, 2, 1, 2, 1};  // queries at positions 0, 1, 2
  for (float weight : {1.0f, -1.0f}) {
    const std::vector<float> w = {weight, weight, weight};
    const std::vector<PagedSequence> seqs = {{0, 3, 0, pages_of(pool, stored)}};
    std::vector<int32_t> out(6, 7);
    const IndexerTopkArgs a{.q = ConstMatrix(q.data(), 3, 2),
                            .weights = ConstMatrix(w.data(), 3, 1),
                            .seqs = seqs,
                            .selected = MatrixView<int32_t>(out.data(), 3, 2),
                            .n_heads = 1,
                            .head_dim = 2,
                            .key_col0 = 2,
                            .scale = 1.0f};
    std::vector<std::vector<int32_t>> results;
    ref::indexer_topk(a);
    results.push_back(out);
    for (auto& nb : backends_under_test()) {
      std::fill(out.begin(), out.end(), 7);
      nb.backend->indexer_topk(a);
      results.push_back(out);
    }
    const std::vector<int32_t> want =
        weight > 0 ? std::vector<int32_t>{0, -1, 0, 1, 2, 0} : std::vector<int32_t>{0, -1, 1, 0, 1, 0};
    for (const auto& r : results) EXPECT_EQ(r, want) << weight;
  }
}

// indexer_topk over random caches (several sequences, block sizes that do not divide the lengths,
// F32 and BF16 rows, top-k below and above the visible lengths): every backend selects exactly the
// oracle's keys in its order.
TEST(IndexerTopk, EveryBackendSelectsTheOraclesKeys) {
  Differential diff;
  const int64_t n_heads = 4, d = 16, col0 = 8;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    for (int64_t topk : {1, 4, 64}) {
      KvBlockPool pool(4, col0 + d, KvCacheOptions{.dtype = dtype, .block_tokens = 5});
      const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 23}, {6, 6}, {4, 13}};  // (T, S)
      std::vector<GuardedMatrix> first, second;
      std::vector<PagedSeq> stored;
      for (auto [t, s] : shapes) {
        first.emplace_back(s, 4);
        second.emplace_back(s, col0 + d);
        second.back().fill_random(static_cast<uint64_t>(s) + 31);
        stored.push_back(write_pages(pool, first.back().cview(), second.back().cview(), 0));
      }
      std::vector<PagedSequence> seqs;
      int64_t rows = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        seqs.push_back(
            {rows, shapes[i].first, shapes[i].second - shapes[i].first, pages_of(pool, stored[i])});
        rows += shapes[i].first;
      }
      GuardedMatrix q(rows, n_heads * d), w(rows, n_heads);
      q.fill_random(41);
      w.fill_random(42);  // weights of both signs: the relu and the sign both matter
      diff.check("indexer_topk", fmt::format("{} topk {}", kv_dtype_name(dtype), topk), rows, topk, kTolExact,
                 [&](Backend& be, GuardedMatrix& out) {
                   std::vector<int32_t> ids(static_cast<size_t>(rows * topk));
                   be.indexer_topk({.q = q.cview(),
                                    .weights = w.cview(),
                                    .seqs = seqs,
                                    .selected = MatrixView<int32_t>(ids.data(), rows, topk),
                                    .n_heads = n_heads,
                                    .head_dim = d,
                                    .key_col0 = col0,
                                    .scale = 0.25f});
                   const Matrix o = out.view();
                   for (int64_t r = 0; r < rows; ++r)
                     for (int64_t j = 0; j < topk; ++j)
                       o.row(r)[j] = static_cast<float>(ids[static_cast<size_t>(r * topk + j)]);
                 });
    }
  }
  diff.finish();
}

TEST(KvDtype, Fp8E4M3RoundsToNearestAndSaturates) {
  EXPECT_EQ(f32_to_f8e4m3(0.0f), 0u);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.0f)), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-3.5f)), -3.5f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1000.0f)), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.0625f)), 1.0f);  // halfway between 1 and 1.125: even
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1.07f)), 1.125f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(0.001953125f)), 0.001953125f);  // smallest subnormal 2^-9
  for (int b = 0; b < 256; ++b) {                                       // every finite code round-trips
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(f)), f) << b;
  }
}

}  // namespace
}  // namespace day0::test
