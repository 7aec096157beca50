// Differential tests of attention (GQA, masks, sinks, KV cache offsets) and MLA (both forms).
#include <cmath>

#include <fmt/format.h>

#include "differential_harness.h"

namespace day0::test {
namespace {

struct AttentionCase {
  const char* name;
  int64_t t, s, n_heads, n_kv, d, dv, q_pos0, k_pos0;
  AttentionMask mask;
  int64_t window;
  bool sinks;
};

const AttentionCase kAttentionCases[] = {
    {"decode causal GQA", 1, 300, 8, 2, 64, 64, 299, 0, AttentionMask::kCausal, 0, false},
    {"prefill causal MHA", 37, 37, 4, 4, 40, 40, 0, 0, AttentionMask::kCausal, 0, false},
    {"chunk after cache", 5, 25, 6, 3, 32, 32, 20, 0, AttentionMask::kCausal, 0, false},
    {"sliding window 16", 9, 40, 4, 2, 64, 64, 31, 0, AttentionMask::kSliding, 16, false},
    {"sliding + sinks (gpt-oss)", 7, 150, 8, 2, 64, 64, 143, 0, AttentionMask::kSliding, 128, true},
    {"full + sinks decode", 1, 200, 4, 1, 64, 64, 199, 0, AttentionMask::kCausal, 0, true},
    {"chunked 8 (llama4)", 12, 30, 4, 2, 16, 16, 18, 0, AttentionMask::kChunked, 8, false},
    {"ring cache k_pos0=30", 3, 16, 2, 1, 24, 24, 43, 30, AttentionMask::kSliding, 16, false},
    {"dqk 192 dv 128 (MLA naive)", 3, 19, 2, 2, 192, 128, 16, 0, AttentionMask::kCausal, 0, false},
    {"no visible key", 1, 4, 2, 1, 8, 8, 2, 10, AttentionMask::kCausal, 0, false},
};

TEST(Differential, AttentionMasksSinksAndCache) {
  Differential diff;
  for (const auto& c : kAttentionCases) {
    GuardedMatrix q(c.t, c.n_heads * c.d);
    GuardedMatrix k(c.s, c.n_kv * c.d);
    GuardedMatrix v(c.s, c.n_kv * c.dv);
    q.fill_random(1, 0.5f);
    k.fill_random(2, 0.5f);
    v.fill_random(3);
    const auto sinks = random_vector(c.n_heads, 4, 2.0f);
    diff.check("attention", c.name, c.t, c.n_heads * c.dv, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.attention({.q = q.cview(),
                    .k = k.cview(),
                    .v = v.cview(),
                    .out = out.view(),
                    .n_heads = c.n_heads,
                    .n_kv_heads = c.n_kv,
                    .head_dim = c.d,
                    .v_head_dim = c.dv,
                    .q_pos0 = c.q_pos0,
                    .k_pos0 = c.k_pos0,
                    .mask = c.mask,
                    .window = c.window,
                    .sinks = c.sinks ? std::span<const float>(sinks) : std::span<const float>()});
    });
  }
  diff.finish();
}

TEST(Differential, MlaBothFormsEveryFormat) {
  Differential diff;
  const int64_t n_heads = 4, d_nope = 16, d_rope = 8, d_v = 12, rank = 32;
  for (WeightFormat format : kAllWeightFormats) {
    const TestWeight w = random_weight(format, n_heads * (d_nope + d_v), rank, 11, 0.3f);
    for (auto [t, s, q_pos0] : {std::tuple<int64_t, int64_t, int64_t>{1, 20, 19}, {5, 5, 0}, {3, 40, 37}}) {
      GuardedMatrix q(t, n_heads * (d_nope + d_rope));
      GuardedMatrix c_kv(s, rank);
      GuardedMatrix k_pe(s, d_rope);
      q.fill_random(21, 0.5f);
      c_kv.fill_random(22);
      k_pe.fill_random(23);
      for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
        const std::string name = fmt::format("{} {} T={} S={}", weight_format_name(format),
                                             form == MlaForm::kNaive ? "naive" : "absorbed", t, s);
        diff.check("mla_attention", name, t, n_heads * d_v, matmul_tolerance(format),
                   [&](Backend& be, GuardedMatrix& out) {
                     be.mla_attention({.q = q.cview(),
                                       .c_kv = c_kv.cview(),
                                       .k_pe = k_pe.cview(),
                                       .w_kv_b = w.view(),
                                       .out = out.view(),
                                       .n_heads = n_heads,
                                       .d_nope = d_nope,
                                       .d_rope = d_rope,
                                       .d_v = d_v,
                                       .kv_lora_rank = rank,
                                       .q_pos0 = q_pos0,
                                       .scale = 0.2f,
                                       .form = form});
                   });
      }
    }
  }
  diff.finish();
}

// The two MLA forms must agree with each other on the reference backend as well (absorption is an
// algebraic identity, not an approximation).
TEST(Differential, MlaAbsorbedEqualsNaiveOnReference) {
  auto ref = reference_backend();
  const int64_t n_heads = 3, d_nope = 8, d_rope = 4, d_v = 8, rank = 16, t = 4, s = 9;
  const TestWeight w = random_weight(WeightFormat::kBF16, n_heads * (d_nope + d_v), rank, 5);
  GuardedMatrix q(t, n_heads * (d_nope + d_rope));
  GuardedMatrix c_kv(s, rank);
  GuardedMatrix k_pe(s, d_rope);
  q.fill_random(1);
  c_kv.fill_random(2);
  k_pe.fill_random(3);
  GuardedMatrix naive(t, n_heads * d_v);
  GuardedMatrix absorbed(t, n_heads * d_v);
  for (auto* out : {&naive, &absorbed}) {
    ref->mla_attention({.q = q.cview(),
                        .c_kv = c_kv.cview(),
                        .k_pe = k_pe.cview(),
                        .w_kv_b = w.view(),
                        .out = out->view(),
                        .n_heads = n_heads,
                        .d_nope = d_nope,
                        .d_rope = d_rope,
                        .d_v = d_v,
                        .kv_lora_rank = rank,
                        .q_pos0 = 5,
                        .scale = 0.3f,
                        .form = out == &naive ? MlaForm::kNaive : MlaForm::kAbsorbed});
  }
  EXPECT_LT(nmse(absorbed.values(), naive.values()), 1e-12);
  EXPECT_GT(nmse(naive.values(), std::vector<float>(naive.values().size(), 0.0f)), 0.5);  // not all zeros
}

}  // namespace
}  // namespace day0::test
