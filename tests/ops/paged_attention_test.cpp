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
