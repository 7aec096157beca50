// Differential tests of MoE routing and experts, argmax and sampling.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/backends/reference/reference_kernels.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

struct RouterCase {
  const char* name;
  int64_t t, experts, top_k;
  RouterScoring scoring;
  TopkMethod method;
  int64_t n_group, topk_group;
  bool norm;
  float rsf;
};

const RouterCase kRouterCases[] = {
    {"mixtral softmax greedy renorm", 5, 8, 2, RouterScoring::kSoftmax, TopkMethod::kGreedy, 1, 1, true,
     1.0f},
    {"qwen2-moe no renorm", 3, 60, 4, RouterScoring::kSoftmax, TopkMethod::kGreedy, 1, 1, false, 1.0f},
    {"deepseek-v2 group max", 4, 160, 6, RouterScoring::kSoftmax, TopkMethod::kGroupLimitedGreedy, 8, 3,
     false, 16.0f},
    {"deepseek-v3 noaux_tc", 7, 256, 8, RouterScoring::kSigmoid, TopkMethod::kNoauxTc, 8, 4, true, 2.5f},
    {"kimi noaux_tc 1 group", 2, 384, 8, RouterScoring::kSigmoid, TopkMethod::kNoauxTc, 1, 1, true, 2.827f},
    {"gpt-oss logits then softmax", 6, 32, 4, RouterScoring::kSoftmax, TopkMethod::kLogitsThenSoftmax, 1, 1,
     false, 1.0f},
    {"llama4 logits then sigmoid", 3, 16, 1, RouterScoring::kSigmoid, TopkMethod::kLogitsThenSigmoid, 1, 1,
     false, 1.0f},
    {"longcat softmax + bias over real and zero experts", 5, 12, 3, RouterScoring::kSoftmax,
     TopkMethod::kNoauxTc, 1, 1, false, 6.0f},
};

TEST(Differential, MoeRouterEveryMethod) {
  auto ref = reference_backend();
  auto backends = backends_under_test();
  for (const auto& c : kRouterCases) {
    GuardedMatrix logits(c.t, c.experts);
    logits.fill_random(c.experts, 2.0f);
    const auto bias = random_vector(c.experts, 9, 0.5f);
    auto run = [&](Backend& be, std::vector<int32_t>& ids, std::vector<float>& weights) {
      ids.assign(static_cast<size_t>(c.t * c.top_k), -1);
      weights.assign(ids.size(), 0.0f);
      be.moe_router({.logits = logits.cview(),
                     .correction_bias = c.method == TopkMethod::kNoauxTc ? std::span<const float>(bias)
                                                                         : std::span<const float>(),
                     .scoring = c.scoring,
                     .method = c.method,
                     .top_k = c.top_k,
                     .n_group = c.n_group,
                     .topk_group = c.topk_group,
                     .norm_topk_prob = c.norm,
                     .renorm_eps = 1e-20f,
                     .routed_scaling_factor = c.rsf,
                     .expert_ids = {ids.data(), c.t, c.top_k},
                     .expert_weights = {weights.data(), c.t, c.top_k}});
    };
    std::vector<int32_t> want_ids;
    std::vector<float> want_w;
    run(*ref, want_ids, want_w);
    for (auto& nb : backends) {
      std::vector<int32_t> ids;
      std::vector<float> w;
      run(*nb.backend, ids, w);
      EXPECT_EQ(ids, want_ids) << c.name << " on " << nb.label;
      EXPECT_LT(nmse(w, want_w), kTolFloat) << c.name << " on " << nb.label;
    }
  }
}

struct ExpertsCase {
  const char* name;
  int64_t t, experts, top_k, hidden, inter;
  GateUpLayout layout;
  bool clamped, input_scaling, biases, accumulate;
  int64_t zero_experts = 0;  // LongCat-Flash identity experts after the real ones
  // A serving step's routing: every token's first pick is one of three busy experts (t / 3 tokens each, past
  // the row-dot limit of the cpu backend), its second one of the others (a few tokens each).
  bool skewed = false;
  bool relu2 = false;      // Nemotron-H's ungated relu(up x)^2 experts (no gate weight)
  bool gelu_tanh = false;  // GEGLU experts: gelu_tanh(gate x) * up x
  // > 0: DeepSeek-V4's clamped SwiGLU, silu(min(g, limit)) * clamp(u, -limit, limit) (alpha 1, no up
  // shift), with this limit (small, so that the random projections cross it).
  float plain_clamp_limit = 0.0f;
};

const ExpertsCase kExpertsCases[] = {
    {"decode top-4 of 16 (12 experts idle)", 1, 16, 4, 64, 32, GateUpLayout::kSeparate, false, false, false,
     false},
    {"64 experts, 5 tokens top-8", 5, 64, 8, 64, 32, GateUpLayout::kSeparate, false, false, false, true},
    {"prefill 40 tokens top-2", 40, 8, 2, 96, 64, GateUpLayout::kSeparate, false, false, false, false},
    {"gpt-oss interleaved clamped biases", 6, 8, 4, 64, 32, GateUpLayout::kInterleaved, true, false, true,
     false},
    {"llama4 concatenated input scaling", 4, 8, 1, 64, 64, GateUpLayout::kConcatenated, false, true, false,
     false},
    {"longcat 8 real + 4 zero experts top-3", 9, 8, 3, 64, 32, GateUpLayout::kSeparate, false, false, false,
     false, 4},
    {"longcat zero experts accumulate", 3, 4, 3, 64, 32, GateUpLayout::kSeparate, false, false, false, true,
     2},
    {"serving step: 3 busy experts, 13 with a few tokens", 60, 16, 2, 64, 32, GateUpLayout::kSeparate, false,
     false, true, true, 0, true},
    {"serving step interleaved clamped", 60, 16, 2, 64, 32, GateUpLayout::kInterleaved, true, false, true,
     false, 0, true},
    // Rows of kilobytes: the cpu row-dot pass takes an expert's gate / up columns in several items (BF16:
    // 64 and a short 32, float32: three of 32).
    {"wide rows: an expert's columns in several items", 5, 8, 2, 3200, 96, GateUpLayout::kSeparate, false,
     false, false, false},
    // Short rows and a wide expert: one row-dot item takes all 608 columns, walked in pieces of 256, 256
    // and 96; with biases (added per piece) and the interleaved layout (pieces of row pairs).
    {"narrow rows: an item in several pieces", 3, 4, 2, 64, 608, GateUpLayout::kSeparate, false, false, true,
     false},
    {"narrow rows interleaved: pieces of row pairs", 3, 4, 2, 64, 608, GateUpLayout::kInterleaved, false,
     false, true, false},
    {"relu2 decode top-6 of 16", 1, 16, 6, 64, 64, GateUpLayout::kSeparate, false, false, false, false, 0,
     false, true},
    {"relu2 prefill with biases, accumulate", 40, 8, 2, 96, 32, GateUpLayout::kSeparate, false, false, true,
     true, 0, false, true},
    {"relu2 serving step: 3 busy experts", 60, 16, 2, 64, 32, GateUpLayout::kSeparate, false, false, false,
     false, 0, true, true},
    // GEGLU experts (fused gate_up rows, gate half first): decode, a prefill with biases into an
    // accumulated output, a serving step's busy experts, separate gate / up rows in several pieces.
    {"geglu decode top-8 of 32", 1, 32, 8, 64, 64, GateUpLayout::kConcatenated, false, false, false, false, 0,
     false, false, true},
    {"geglu prefill with biases, accumulate", 40, 8, 2, 96, 32, GateUpLayout::kConcatenated, false, false,
     true, true, 0, false, false, true},
    {"geglu serving step: 3 busy experts", 60, 16, 2, 64, 32, GateUpLayout::kConcatenated, false, false,
     false, false, 0, true, false, true},
    {"geglu separate rows: an item in several pieces", 3, 4, 2, 64, 608, GateUpLayout::kSeparate, false,
     false, true, false, 0, false, false, true},
    // DeepSeek-V4's experts: concatenated gate_up rows (gate half first), plain clamp; decode, a serving
    // step's busy experts, separate rows in several pieces.
    {"plain clamp decode top-6 of 16", 1, 16, 6, 64, 64, GateUpLayout::kConcatenated, true, false, false,
     false, 0, false, false, false, 0.5f},
    {"plain clamp serving step: 3 busy experts", 60, 16, 2, 64, 32, GateUpLayout::kConcatenated, true, false,
     false, true, 0, true, false, false, 0.5f},
    {"plain clamp separate rows: an item in several pieces", 3, 4, 2, 64, 608, GateUpLayout::kSeparate, true,
     false, true, false, 0, false, false, false, 0.5f},
};

TEST(Differential, MoeExpertsEveryFormatAndLayout) {
  Differential diff;
  for (WeightFormat format : kAllWeightFormats) {
    for (const auto& c : kExpertsCases) {
      std::vector<TestWeight> store;
      std::vector<std::vector<float>> biases;
      std::vector<ExpertWeights> experts(static_cast<size_t>(c.experts));
      const bool fused = c.layout != GateUpLayout::kSeparate;
      store.reserve(static_cast<size_t>(3 * c.experts));
      biases.reserve(static_cast<size_t>(2 * c.experts));
      for (int64_t e = 0; e < c.experts; ++e) {
        auto& ew = experts[static_cast<size_t>(e)];
        if (!c.relu2) {
          store.push_back(random_weight(format, fused ? 2 * c.inter : c.inter, c.hidden, 100 + 3 * e, 0.2f));
          ew.gate = store.back().view();
        }
        if (!fused) {
          store.push_back(random_weight(format, c.inter, c.hidden, 101 + 3 * e, 0.2f));
          ew.up = store.back().view();
        }
        store.push_back(random_weight(format, c.hidden, c.inter, 102 + 3 * e, 0.2f));
        ew.down = store.back().view();
        if (c.biases) {
          biases.push_back(random_vector(2 * c.inter, 200 + e));
          (c.relu2 ? ew.up_bias : ew.gate_bias) = biases.back().data();
          biases.push_back(random_vector(c.hidden, 300 + e));
          ew.down_bias = biases.back().data();
        }
      }
      // Deterministic distinct experts per token; some experts get no token at all.
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < c.t; ++t) {
        for (int64_t j = 0; j < c.top_k; ++j) {
          if (c.skewed) {
            ids.push_back(static_cast<int32_t>(j == 0 ? t % 3 : 3 + (t * 5) % (c.experts - 3)));
          } else {
            ids.push_back(static_cast<int32_t>((t * 7 + j * 3) % (c.experts + c.zero_experts)));
          }
        }
      }
      const auto weights = random_vector(c.t * c.top_k, 5, 0.5f);
      GuardedMatrix x(c.t, c.hidden);
      x.fill_random(6, 2.0f);
      const std::string name = fmt::format("{} {}", weight_format_name(format), c.name);
      diff.check("moe_experts", name, c.t, c.hidden, matmul_tolerance(format),
                 [&](Backend& be, GuardedMatrix& out) {
                   if (c.accumulate) out.fill_random(8);
                   be.moe_experts({.x = x.cview(),
                                   .expert_ids = {ids.data(), c.t, c.top_k},
                                   .expert_weights = {weights.data(), c.t, c.top_k},
                                   .experts = experts,
                                   .layout = c.layout,
                                   .clamped = c.clamped,
                                   .relu2 = c.relu2,
                                   .gelu_tanh = c.gelu_tanh,
                                   .limit = c.plain_clamp_limit > 0 ? c.plain_clamp_limit : 7.0f,
                                   .alpha = c.plain_clamp_limit > 0 ? 1.0f : 1.702f,
                                   .up_shift = c.plain_clamp_limit > 0 ? 0.0f : 1.0f,
                                   .input_scaling = c.input_scaling,
                                   .n_zero_experts = c.zero_experts,
                                   .out = out.view(),
                                   .accumulate = c.accumulate});
                 });
    }
  }
  diff.finish();
}

// n experts with separate gate / up / down matrices of `format` (random, scale 0.2), expert e's from
// seeds seed + 3e, + 1, + 2; `store` owns the bytes the views point into.
struct ExpertSet {
  std::vector<TestWeight> store;
  std::vector<ExpertWeights> experts;
};
ExpertSet separate_experts(WeightFormat format, int64_t n, int64_t hidden, int64_t inter, uint64_t seed) {
  ExpertSet set;
  set.store.reserve(static_cast<size_t>(3 * n));
  set.experts.resize(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    auto& ew = set.experts[static_cast<size_t>(e)];
    const uint64_t s = seed + 3 * static_cast<uint64_t>(e);
    set.store.push_back(random_weight(format, inter, hidden, s, 0.2f));
    ew.gate = set.store.back().view();
    set.store.push_back(random_weight(format, inter, hidden, s + 1, 0.2f));
    ew.up = set.store.back().view();
    set.store.push_back(random_weight(format, hidden, inter, s + 2, 0.2f));
    ew.down = set.store.back().view();
  }
  return set;
}

// A zero-computation expert returns its input: a token whose picks are all zero experts gets
// (sum of its weights) x its input, on every backend, and no real expert is touched.
TEST(MoeZeroExperts, ReturnTheirInputTimesTheirWeight) {
  std::vector<TestWeight> store;
  store.push_back(random_weight(WeightFormat::kF32, 8, 16, 1, 0.2f));
  store.push_back(random_weight(WeightFormat::kF32, 8, 16, 2, 0.2f));
  store.push_back(random_weight(WeightFormat::kF32, 16, 8, 3, 0.2f));
  std::vector<ExpertWeights> experts(1);
  experts[0].gate = store[0].view();
  experts[0].up = store[1].view();
  experts[0].down = store[2].view();
  GuardedMatrix x(1, 16);
  x.fill_random(4, 1.0f);
  const std::vector<int32_t> ids = {2, 1};  // both zero experts (1 real expert, ids 1 and 2 zero)
  const std::vector<float> weights = {0.75f, 1.5f};
  auto backends = backends_under_test();
  backends.push_back({"reference", reference_backend()});
  for (auto& nb : backends) {
    GuardedMatrix out(1, 16);
    nb.backend->moe_experts({.x = x.cview(),
                             .expert_ids = {ids.data(), 1, 2},
                             .expert_weights = {weights.data(), 1, 2},
                             .experts = experts,
                             .n_zero_experts = 2,
                             .out = out.view()});
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_FLOAT_EQ(out.view().row(0)[c], 2.25f * x.cview().row(0)[c]) << nb.label << " column " << c;
    }
    EXPECT_TRUE(out.guards_intact()) << nb.label;
  }
}

// Expert parallelism: a call holding some of the experts (a slot map) adds only the picks of those it
// holds and that are not marked for another copy; two ranks' calls add up to the whole set's output, on
// every backend. Blocks, and blocks with a replica whose picks are split between its two copies.
TEST(MoeExpertBlocks, TwoRanksAddUpToTheWholeSet) {
  const int64_t t = 6, n_experts = 8, k = 3, hidden = 32, inter = 16;
  const ExpertSet set = separate_experts(WeightFormat::kF32, n_experts, hidden, inter, 10);
  const std::vector<ExpertWeights>& experts = set.experts;
  std::vector<int32_t> ids;  // [t, k]: row 5 picks only experts of the second block
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < k; ++j) ids.push_back(static_cast<int32_t>(r == 5 ? 4 + j : (r * 5 + j * 3) % 8));
  const auto weights = random_vector(t * k, 7, 0.5f);
  GuardedMatrix x(t, hidden);
  x.fill_random(3, 1.5f);
  auto backends = backends_under_test();
  backends.push_back({"reference", reference_backend()});
  // A rank holding `held` (expert ids, in slot order); its picks [t, k] have other copies' marked -1.
  struct Rank {
    std::vector<ExpertWeights> weights;  // [slots]
    std::vector<int32_t> slot;           // [n_experts]
    std::vector<int32_t> ids;            // [t, k]
  };
  auto rank = [&](const std::vector<int32_t>& held) {
    Rank r;
    r.slot.assign(static_cast<size_t>(n_experts), -1);
    for (size_t i = 0; i < held.size(); ++i) {
      r.weights.push_back(experts[static_cast<size_t>(held[i])]);
      r.slot[static_cast<size_t>(held[i])] = static_cast<int32_t>(i);
    }
    r.ids = ids;
    return r;
  };
  // Expert 0 is held by both ranks: rank 0 computes its even picks, rank 1 its odd ones.
  std::vector<size_t> zero_picks;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == 0) zero_picks.push_back(i);
  ASSERT_GE(zero_picks.size(), 2u);
  auto even = [&](size_t i) {
    const auto at = std::find(zero_picks.begin(), zero_picks.end(), i);
    return at == zero_picks.end() || (at - zero_picks.begin()) % 2 == 0;
  };
  struct Split {
    const char* name;
    Rank first, second;
  };
  std::vector<Split> splits;
  splits.push_back({"blocks", rank({0, 1, 2, 3}), rank({4, 5, 6, 7})});
  Split replica{"replica", rank({0, 1, 2, 3}), rank({4, 5, 6, 7, 0})};
  for (size_t i = 0; i < ids.size(); ++i) {
    replica.first.ids[i] = ids[i] == 0 && !even(i) ? -1 : ids[i];
    replica.second.ids[i] = ids[i] == 0 && even(i) ? -1 : ids[i];
  }
  splits.push_back(std::move(replica));
  for (auto& nb : backends) {
    auto run = [&](std::span<const ExpertWeights> held, std::span<const int32_t> slot,
                   const std::vector<int32_t>& picks, GuardedMatrix& out) {
      nb.backend->moe_experts({.x = x.cview(),
                               .expert_ids = {picks.data(), t, k},
                               .expert_weights = {weights.data(), t, k},
                               .experts = held,
                               .expert_slot = slot,
                               .n_experts = n_experts,
                               .out = out.view()});
    };
    GuardedMatrix whole(t, hidden);
    run(experts, {}, ids, whole);
    for (const Split& s : splits) {
      GuardedMatrix low(t, hidden), high(t, hidden);
      run(s.first.weights, s.first.slot, s.first.ids, low);
      run(s.second.weights, s.second.slot, s.second.ids, high);
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t col = 0; col < hidden; ++col) {
          const float sum = low.cview().row(r)[col] + high.cview().row(r)[col];
          EXPECT_NEAR(sum, whole.cview().row(r)[col], 1e-5f * (1.0f + std::fabs(whole.cview().row(r)[col])))
              << nb.label << " " << s.name << " row " << r << " column " << col;
        }
      }
      // Row 5 has no pick in the first block: it stays zero there.
      for (int64_t col = 0; col < hidden; ++col) EXPECT_EQ(low.cview().row(5)[col], 0.0f) << nb.label;
      EXPECT_NE(high.cview().row(5)[0], 0.0f) << nb.label;
      EXPECT_TRUE(low.guards_intact() && high.guards_intact()) << nb.label;
    }
    EXPECT_TRUE(whole.guards_intact()) << nb.label;
  }
}

TEST(Differential, ArgmaxAndSamplingAreIdenticalEverywhere) {
  auto ref = reference_backend();
  auto backends = backends_under_test();
  GuardedMatrix logits(6, 1000);
  logits.fill_random(12, 3.0f);
  struct Params {
    float temperature, top_p;
    int64_t top_k;
  };
  for (const Params p :
       {Params{0.0f, 1.0f, 0}, Params{1.0f, 1.0f, 0}, Params{0.7f, 0.9f, 0}, Params{1.3f, 0.5f, 40}}) {
    for (uint64_t seed : {1ull, 42ull}) {
      std::vector<int32_t> want(6);
      ref->sample({logits.cview(), p.temperature, p.top_p, p.top_k, seed, want});
      for (auto& nb : backends) {
        std::vector<int32_t> got(6);
        nb.backend->sample({logits.cview(), p.temperature, p.top_p, p.top_k, seed, got});
        EXPECT_EQ(got, want) << nb.label << " T=" << p.temperature << " top_p=" << p.top_p;
      }
    }
  }
  std::vector<int32_t> want(6);
  ref->argmax({logits.cview(), want});
  for (auto& nb : backends) {
    std::vector<int32_t> got(6);
    nb.backend->argmax({logits.cview(), got});
    EXPECT_EQ(got, want) << nb.label;
  }
  // Ties go to the first (-0 and +0 tie), the largest may sit in a row's tail past whole groups of
  // eight, and a NaN row gets max_element's answer (a leading NaN is never beaten).
  const float nan = std::nanf("");
  const std::vector<std::vector<float>> rows = {{1, 3, 3, 2},
                                                {-0.0f, 0.0f, -1, -2},
                                                {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9},
                                                {1, nan, 5, 2},
                                                {nan, 5, 1, 7, 1, 1, 1, 1, 1, 1},
                                                {-3, -1, -2, -1, -5, -7, -1, -9, -1}};
  for (const auto& row : rows) {
    int32_t expect = -1, got = -1;
    ref->argmax({{row.data(), 1, static_cast<int64_t>(row.size())}, {&expect, 1}});
    EXPECT_EQ(expect, static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    for (auto& nb : backends) {
      nb.backend->argmax({{row.data(), 1, static_cast<int64_t>(row.size())}, {&got, 1}});
      EXPECT_EQ(got, expect) << nb.label << " row of " << row.size();
    }
  }
}

// Serving batches: with BF16 experts and activations allowed to round (not exact), the row-dot path
// rounds x and the SwiGLU output to BF16 and runs vdpbf16ps. A token's output must still be the bits
// it gets alone, whatever else the step holds (experts with one to several tokens, widths with tails), and
// close to the exact float32 output.
TEST(MoeRowDots, Bf16RoundedTokensGetTheBitsOfTheirOwnRun) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: the experts' row dots do not round x";
  const int64_t t = 12, n_experts = 8, k = 2, hidden = 200, inter = 72;
  const ExpertSet set = separate_experts(WeightFormat::kBF16, n_experts, hidden, inter, 40);
  const std::vector<ExpertWeights>& experts = set.experts;
  std::vector<int32_t> ids;  // [t, k]: expert 0 gets every token's first pick, the rest one to three
  for (int64_t r = 0; r < t; ++r) {
    ids.push_back(0);
    ids.push_back(static_cast<int32_t>(1 + (r * r) % 7));
  }
  const auto weights = random_vector(t * k, 43, 0.5f);
  GuardedMatrix x(t, hidden);
  x.fill_random(44, 1.5f);
  BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
  opts.bf16_dot_gemm = true;
  auto be = std::move(make_backend("cpu", opts).value());
  auto run = [&](int64_t first, int64_t rows, bool exact) {
    GuardedMatrix out(rows, hidden);
    be->moe_experts({.x = x.cview().row_slice(first, rows),
                     .expert_ids = {ids.data() + first * k, rows, k},
                     .expert_weights = {weights.data() + first * k, rows, k},
                     .experts = experts,
                     .out = out.view(),
                     .exact = exact});
    EXPECT_TRUE(out.guards_intact());
    return out.values();
  };
  const auto batch = run(0, t, false);
  const auto exact = run(0, t, true);
  EXPECT_NE(batch, exact);  // x rounded to BF16
  EXPECT_LT(nmse(batch, exact), 1e-4);
  for (int64_t r = 0; r < t; ++r) {
    const auto alone = run(r, 1, false);
    for (int64_t col = 0; col < hidden; ++col)
      ASSERT_EQ(batch[static_cast<size_t>(r * hidden + col)], alone[static_cast<size_t>(col)])
          << "token " << r << " column " << col;
  }
}

// The expert shapes and options the tests below compare against each expert's own ops.
struct OwnOpsCase {
  const char* name;
  GateUpLayout layout;
  bool biases, clamped, input_scaling;
  int64_t hidden, inter;
  bool gelu_tanh = false;  // GEGLU experts
};

// n experts of `c`'s layout from make(rows, cols, seed) (gate or fused gate_up, up where separate, down
// from seeds seed + 3e, + 1, + 2), with random biases (seeds seed + 10 + e, + 20 + e, + 30 + e) where
// c.biases; `store` and `biases` own what the views point into.
struct BiasedExperts {
  std::vector<TestWeight> store;
  std::vector<std::vector<float>> biases;
  std::vector<ExpertWeights> experts;
};
template <class Make>
BiasedExperts biased_experts(const OwnOpsCase& c, int64_t n, uint64_t seed, Make make) {
  BiasedExperts set;
  const bool fused = c.layout != GateUpLayout::kSeparate;
  const int64_t gu_rows = fused ? 2 * c.inter : c.inter;
  set.store.reserve(static_cast<size_t>(3 * n));
  set.biases.reserve(static_cast<size_t>(3 * n));
  set.experts.resize(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    auto& ew = set.experts[static_cast<size_t>(e)];
    const uint64_t s = seed + 3 * static_cast<uint64_t>(e);
    set.store.push_back(make(gu_rows, c.hidden, s));
    ew.gate = set.store.back().view();
    if (!fused) {
      set.store.push_back(make(c.inter, c.hidden, s + 1));
      ew.up = set.store.back().view();
    }
    set.store.push_back(make(c.hidden, c.inter, s + 2));
    ew.down = set.store.back().view();
    if (c.biases) {
      set.biases.push_back(random_vector(gu_rows, seed + 10 + e));
      ew.gate_bias = set.biases.back().data();
      if (!fused) {
        set.biases.push_back(random_vector(c.inter, seed + 20 + e));
        ew.up_bias = set.biases.back().data();
      }
      set.biases.push_back(random_vector(c.hidden, seed + 30 + e));
      ew.down_bias = set.biases.back().data();
    }
  }
  return set;
}

// The picks of expert e in ids / weights ([t, k]): its tokens and their weights, in token order.
struct ExpertPicks {
  std::vector<int64_t> tokens;
  std::vector<float> weights;
};
ExpertPicks picks_of(int64_t e, const std::vector<int32_t>& ids, const std::vector<float>& weights,
                     int64_t k) {
  ExpertPicks p;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != e) continue;
    p.tokens.push_back(static_cast<int64_t>(i) / k);
    p.weights.push_back(weights[i]);
  }
  return p;
}

// What expert ew gives its picks through the backend's own ops, [n, hidden]: x rows of xv ([t, hidden])
// gathered (times the weight where input_scaling), gate / up matmuls with their biases (non-exact, in
// calls of at most max_rows rows, row_invariant as given), the gated activation (clamped SwiGLU or GEGLU
// from the reference at the arguments' limit / alpha / up shift, else the backend's swiglu op: its level's
// silu_mul), down with its bias.
std::vector<float> expert_by_own_ops(Backend& be, const OwnOpsCase& c, const ExpertWeights& ew,
                                     const std::vector<float>& xv, const ExpertPicks& picks, int64_t max_rows,
                                     bool row_invariant) {
  const MoeExpertsArgs clamp{};  // the clamped SwiGLU's limit, alpha and up shift, as the calls take them
  const bool fused = c.layout != GateUpLayout::kSeparate;
  const int64_t gu_rows = fused ? 2 * c.inter : c.inter;
  const auto n = static_cast<int64_t>(picks.tokens.size());
  std::vector<float> xe(static_cast<size_t>(n * c.hidden)), g(static_cast<size_t>(n * gu_rows)),
      u(static_cast<size_t>(n * c.inter)), gh(u.size()), uh(u.size()), act(u.size()),
      down(static_cast<size_t>(n * c.hidden));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t col = 0; col < c.hidden; ++col) {
      const float v = xv[static_cast<size_t>(picks.tokens[static_cast<size_t>(i)] * c.hidden + col)];
      xe[static_cast<size_t>(i * c.hidden + col)] =
          c.input_scaling ? v * picks.weights[static_cast<size_t>(i)] : v;
    }
  }
  // y [n, w.rows] = x [n, w.cols] w^T + bias, in calls of about equal rows, at most max_rows each.
  const int64_t parts = (n + max_rows - 1) / max_rows;
  const auto matmul_parts = [&](const std::vector<float>& in, const WeightView& w, const float* bias,
                                std::vector<float>& y) {
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t r0 = n * p / parts, rows = n * (p + 1) / parts - r0;
      be.matmul({.x = {in.data() + r0 * w.cols, rows, w.cols},
                 .w = w,
                 .bias = bias,
                 .y = {y.data() + r0 * w.rows, rows, w.rows},
                 .exact = false,
                 .row_invariant = row_invariant});
    }
  };
  matmul_parts(xe, ew.gate, ew.gate_bias, g);
  if (!fused) matmul_parts(xe, ew.up, ew.up_bias, u);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t col = 0; col < c.inter; ++col) {
      const float* gi = g.data() + i * gu_rows;
      const auto at = static_cast<size_t>(i * c.inter + col);
      if (c.layout == GateUpLayout::kInterleaved) {
        gh[at] = gi[2 * col], uh[at] = gi[2 * col + 1];
      } else if (fused) {
        gh[at] = gi[col], uh[at] = gi[c.inter + col];
      } else {
        gh[at] = gi[col], uh[at] = u[at];
      }
      if (c.clamped)
        act[at] = static_cast<float>(
            ref::clamped_swiglu_of(gh[at], uh[at], clamp.limit, clamp.alpha, clamp.up_shift));
      else if (c.gelu_tanh)
        act[at] = static_cast<float>(ref::geglu_of(gh[at], uh[at]));
    }
  }
  if (!c.clamped && !c.gelu_tanh)
    be.swiglu(
        {.gate = {gh.data(), n, c.inter}, .up = {uh.data(), n, c.inter}, .out = {act.data(), n, c.inter}});
  matmul_parts(act, ew.down, ew.down_bias, down);
  return down;
}

// Experts with more tokens than the row dots take (a prefill's) run together on BF16 tiles of 16 token
// lanes. Each must give, bit for bit, what its own three matmuls give through the backend (the few-token
// GEMM's tiles: gathered x, gate and up with their biases, SwiGLU, down), weighted into out expert by
// expert in order with fused multiply-adds: for every gate / up layout, biases, the clamped SwiGLU, GEGLU,
// input scaling, an expert past 8 tiles (narrower column chunks), and odd widths (a last column alone).
TEST(MoeTiles, ExpertsOfManyTokensGiveTheBitsOfTheirOwnMatmuls) {
  if (!cpu_has_avx512_bf16()) GTEST_SKIP() << "no AVX-512 BF16 here: experts never run on BF16 tiles";
  const OwnOpsCase cases[] = {
      {"separate", GateUpLayout::kSeparate, false, false, false, 200, 72},
      {"separate, biases, odd widths", GateUpLayout::kSeparate, true, false, false, 203, 75},
      {"fused gate-up, input scaling", GateUpLayout::kConcatenated, false, false, true, 128, 96},
      {"interleaved, clamped, biases", GateUpLayout::kInterleaved, true, true, false, 96, 40},
      {"fused gate-up, GEGLU, biases", GateUpLayout::kConcatenated, true, false, false, 128, 96, true},
  };
  const int64_t t = 150, n_experts = 8, k = 2;
  std::vector<int32_t> ids;  // [t, k]: expert 0 every token's first pick (10 tiles), the others 17-25 each
  for (int64_t r = 0; r < t; ++r) {
    ids.push_back(0);
    ids.push_back(static_cast<int32_t>(1 + r % 7));
  }
  const auto weights = random_vector(t * k, 51, 0.5f);
  BackendOptions opts;
  opts.n_threads = 2;
  opts.simd = std::min(detected_simd_level(), SimdLevel::kAvx512);
  opts.bf16_dot_gemm = true;
  auto be = std::move(make_backend("cpu", opts).value());
  for (const OwnOpsCase& c : cases) {
    SCOPED_TRACE(c.name);
    const BiasedExperts set = biased_experts(c, n_experts, 60, [](int64_t rows, int64_t cols, uint64_t seed) {
      return random_weight(WeightFormat::kBF16, rows, cols, seed, 0.2f);
    });
    GuardedMatrix x(t, c.hidden);
    x.fill_random(52, 1.5f);
    const std::vector<float> xv = x.values();
    auto run = [&](bool exact) {
      GuardedMatrix out(t, c.hidden);
      be->moe_experts({.x = x.cview(),
                       .expert_ids = {ids.data(), t, k},
                       .expert_weights = {weights.data(), t, k},
                       .experts = set.experts,
                       .layout = c.layout,
                       .clamped = c.clamped,
                       .gelu_tanh = c.gelu_tanh,
                       .input_scaling = c.input_scaling,
                       .out = out.view(),
                       .exact = exact});
      EXPECT_TRUE(out.guards_intact());
      return out.values();
    };
    const auto tiles = run(false);
    // Each expert by itself: matmuls of at most 128 tokens (the few-token GEMM, whose tiles give a token
    // the same bits in any such call).
    std::vector<float> expected(static_cast<size_t>(t * c.hidden), 0.0f);
    for (int64_t e = 0; e < n_experts; ++e) {
      const ExpertPicks picks = picks_of(e, ids, weights, k);
      const auto n = static_cast<int64_t>(picks.tokens.size());
      ASSERT_GT(n, 16);
      ASSERT_GT(n / ((n + 127) / 128), 4);  // every call past the row dots
      const auto down = expert_by_own_ops(*be, c, set.experts[static_cast<size_t>(e)], xv, picks, 128, false);
      for (int64_t i = 0; i < n; ++i) {
        const float w = c.input_scaling ? 1.0f : picks.weights[static_cast<size_t>(i)];
        float* o = expected.data() + picks.tokens[static_cast<size_t>(i)] * c.hidden;
        for (int64_t col = 0; col < c.hidden; ++col)
          o[col] = std::fma(w, down[static_cast<size_t>(i * c.hidden + col)], o[col]);
      }
    }
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_EQ(tiles[i], expected[i])
          << "token " << i / static_cast<size_t>(c.hidden) << " column " << i % static_cast<size_t>(c.hidden);
    EXPECT_LT(nmse(tiles, run(true)), 1e-4);  // BF16 rounding of x and of the activations only
  }
}

// INT8 / INT4 experts (symmetric) of a few tokens run on the integer row dots together, x quantized once
// per slot. Each must give, bit for bit, what its own matmuls give through the backend at the same level
// (x quantized by the matmul driver, the row dots of a few-token call, or the panels past four tokens),
// SwiGLU, down, weighted into out with the level's axpy: the experts of the row dots first, then the
// others, each group in expert order. On every level, both formats, every gate / up layout, biases,
// the clamped SwiGLU, input scaling, odd widths (a block pair's last block alone), a row-invariant call.
TEST(MoeRowDots, IntExpertsGiveTheBitsOfTheirOwnMatmuls) {
  const OwnOpsCase cases[] = {
      {"separate", GateUpLayout::kSeparate, false, false, false, 96, 72},
      {"separate, biases, odd block count", GateUpLayout::kSeparate, true, false, false, 160, 64},
      {"fused gate-up, input scaling", GateUpLayout::kConcatenated, false, false, true, 128, 96},
      {"interleaved, clamped, biases", GateUpLayout::kInterleaved, true, true, false, 96, 40},
  };
  const int64_t t = 6, n_experts = 8, k = 2;
  std::vector<int32_t> ids;  // [t, k]: expert 0 every token's first pick (past the row dots), the rest 1 each
  for (int64_t r = 0; r < t; ++r) {
    ids.push_back(0);
    ids.push_back(static_cast<int32_t>(1 + r % 7));
  }
  const auto weights = random_vector(t * k, 61, 0.5f);
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions opts;
    opts.n_threads = 2;
    opts.simd = level;
    auto be = std::move(make_backend("cpu", opts).value());
    const auto axpy = cpu::kernels_for(level).axpy;
    for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
      for (const OwnOpsCase& c : cases) {
        const BiasedExperts set =
            biased_experts(c, n_experts, 160, [&](int64_t rows, int64_t cols, uint64_t seed) {
              return random_int_weight(format, rows, cols, cols % 32 == 0 ? 32 : cols, false, seed, 0.2f);
            });
        GuardedMatrix x(t, c.hidden);
        x.fill_random(62, 1.5f);
        const std::vector<float> xv = x.values();
        for (bool row_invariant : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} {}{}", simd_level_name(level), weight_format_name(format), c.name,
                                   row_invariant ? ", row-invariant" : ""));
          GuardedMatrix out(t, c.hidden);
          be->moe_experts({.x = x.cview(),
                           .expert_ids = {ids.data(), t, k},
                           .expert_weights = {weights.data(), t, k},
                           .experts = set.experts,
                           .layout = c.layout,
                           .clamped = c.clamped,
                           .input_scaling = c.input_scaling,
                           .out = out.view(),
                           .exact = false,
                           .row_invariant = row_invariant});
          ASSERT_TRUE(out.guards_intact());
          const std::vector<float> got = out.values();
          // Experts in the order moe_experts adds them: those of the row dots, then the others.
          std::vector<int64_t> order;
          for (int pass = 0; pass < 2; ++pass) {
            for (int64_t e = 0; e < n_experts; ++e) {
              const auto n = std::count(ids.begin(), ids.end(), static_cast<int32_t>(e));
              const bool row_dots = n <= 4 || row_invariant;
              if (n > 0 && row_dots == (pass == 0)) order.push_back(e);
            }
          }
          std::vector<float> expected(static_cast<size_t>(t * c.hidden), 0.0f);
          for (int64_t e : order) {
            const ExpertPicks picks = picks_of(e, ids, weights, k);
            const auto down =
                expert_by_own_ops(*be, c, set.experts[static_cast<size_t>(e)], xv, picks, t, row_invariant);
            for (size_t i = 0; i < picks.tokens.size(); ++i) {
              const float w = c.input_scaling ? 1.0f : picks.weights[i];
              axpy(w, down.data() + static_cast<int64_t>(i) * c.hidden,
                   expected.data() + picks.tokens[i] * c.hidden, c.hidden);
            }
          }
          for (size_t i = 0; i < expected.size(); ++i)
            ASSERT_EQ(got[i], expected[i]) << "token " << i / static_cast<size_t>(c.hidden) << " column "
                                           << i % static_cast<size_t>(c.hidden);
        }
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
