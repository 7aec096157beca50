// MoE experts under row invariance (MoeExpertsArgs::row_invariant): every token of a call gets the bits
// it gets in a call of its own, however many tokens its experts receive. A verification step of several
// sequences' drafts (serve) can send more than kMoeRowDotMaxTokens tokens to one expert, past the
// experts' row-dot limit; a different bit there could change a greedy token against plain decoding.
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "day0/backends/cpu/simd_level.h"
#include "day0/graph/decompositions.h"
#include "op_test_support.h"

namespace day0::test {
namespace {

struct Case {
  const char* name;
  GateUpLayout layout;
  bool biases = false;
  bool clamped = false;
  bool input_scaling = false;
  bool relu2 = false;
  int64_t zero_experts = 0;  // identity experts after the real ones (picked by some tokens)
};

// Every cpu SIMD level here (BF16 GEMMs on both routes where the CPU has vdpbf16ps), and the reference.
std::vector<NamedBackend> row_invariant_backends() {
  std::vector<NamedBackend> out;
  for (SimdLevel level : available_simd_levels()) {
    const bool both = level >= SimdLevel::kAvx512 && cpu_has_avx512_bf16();
    for (bool dot : {true, false}) {
      if (!both && !dot) continue;
      BackendOptions opts;
      opts.simd = level;
      opts.n_threads = 2;
      opts.bf16_dot_gemm = dot;
      out.push_back(
          {fmt::format("cpu/{}{}", simd_level_name(level), both ? (dot ? "/bf16-dot" : "/bf16-fma") : ""),
           std::move(make_backend("cpu", opts).value())});
    }
  }
  out.push_back({"reference", reference_backend()});
  return out;
}

// A call of T tokens, top-3 of 6 experts: expert 2 takes every token (17, 33 or 64: past the row-dot
// limit of 16, and past the tiles' 16-token lanes), at a position in the token's picks that varies; the
// other picks spread over the other five experts, which get a few tokens each at T = 17 and more than 16
// at T = 64. Row r of the row-invariant call must equal, bit for bit, token r alone, in every weight
// format, exact or not, for each gate / up layout.
TEST(MoeRowInvariant, ExpertsOfManyTokensGiveEachRowTheBitsOfItsOwnCall) {
  constexpr int64_t kTokens = 64, kExperts = 6, kTopK = 3, kHidden = 96, kInter = 64, kBusy = 2;
  const Case cases[] = {
      {"separate", GateUpLayout::kSeparate},
      {"interleaved, clamped, biases", GateUpLayout::kInterleaved, true, true},
      {"concatenated, input scaling", GateUpLayout::kConcatenated, false, false, true},
      {"relu2, biases, zero experts", GateUpLayout::kSeparate, true, false, false, true, 2},
  };
  auto backends = row_invariant_backends();
  GuardedMatrix x(kTokens, kHidden);
  x.fill_random(31, 2.0f);
  const auto weights = random_vector(kTokens * kTopK, 32, 0.5f);
  for (const Case& c : cases) {
    // [kTokens, kTopK] picks: the busy expert at position r % 3, the others distinct from it and each other
    // (with zero experts, every fifth token's last pick is one).
    const int32_t others[] = {0, 1, 3, 4, 5};
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < kTokens; ++r) {
      int32_t row[kTopK];
      row[r % kTopK] = kBusy;
      row[(r + 1) % kTopK] = others[r % 5];
      row[(r + 2) % kTopK] = c.zero_experts > 0 && r % 5 == 4 ? static_cast<int32_t>(kExperts + r % 2)
                                                              : others[(r + 1 + r / 5 % 4) % 5];
      ids.insert(ids.end(), row, row + kTopK);
    }
    for (WeightFormat format : kAllWeightFormats) {
      const bool fused = c.layout != GateUpLayout::kSeparate;
      std::vector<TestWeight> store;
      std::vector<std::vector<float>> biases;
      store.reserve(3 * kExperts);
      biases.reserve(3 * kExperts);
      std::vector<ExpertWeights> experts(kExperts);
      for (int64_t e = 0; e < kExperts; ++e) {
        ExpertWeights& ew = experts[static_cast<size_t>(e)];
        const uint64_t seed = 400 + 3 * static_cast<uint64_t>(e);
        if (!c.relu2) {
          store.push_back(random_weight(format, fused ? 2 * kInter : kInter, kHidden, seed, 0.2f));
          ew.gate = store.back().view();
        }
        if (!fused) {
          store.push_back(random_weight(format, kInter, kHidden, seed + 1, 0.2f));
          ew.up = store.back().view();
        }
        store.push_back(random_weight(format, kHidden, kInter, seed + 2, 0.2f));
        ew.down = store.back().view();
        if (c.biases) {
          biases.push_back(random_vector(2 * kInter, 500 + e));
          (c.relu2 ? ew.up_bias : ew.gate_bias) = biases.back().data();
          biases.push_back(random_vector(kHidden, 600 + e));
          ew.down_bias = biases.back().data();
        }
      }
      for (auto& nb : backends) {
        // The backend's own kernel, and the decomposition into gathers and matmuls that backends without
        // one (and the partial backend's host fallback) run.
        for (const bool decomposed : {false, true}) {
          for (bool exact : {true, false}) {
            // Tokens [first, first + rows) in one call: [rows, kHidden].
            const auto run = [&](int64_t first, int64_t rows, bool row_invariant) {
              GuardedMatrix out(rows, kHidden);
              const MoeExpertsArgs args{.x = x.cview().row_slice(first, rows),
                                        .expert_ids = {ids.data() + first * kTopK, rows, kTopK},
                                        .expert_weights = {weights.data() + first * kTopK, rows, kTopK},
                                        .experts = experts,
                                        .layout = c.layout,
                                        .clamped = c.clamped,
                                        .relu2 = c.relu2,
                                        .input_scaling = c.input_scaling,
                                        .n_zero_experts = c.zero_experts,
                                        .out = out.view(),
                                        .exact = exact,
                                        .row_invariant = row_invariant};
              if (decomposed) {
                decompose_moe_experts(*nb.backend, args);
              } else {
                nb.backend->moe_experts(args);
              }
              EXPECT_TRUE(out.guards_intact()) << nb.label;
              return out.values();
            };
            std::vector<std::vector<float>> alone;  // [kTokens][kHidden]: a decode step's call per token
            for (int64_t r = 0; r < kTokens; ++r) alone.push_back(run(r, 1, false));
            for (int64_t t : {int64_t{17}, int64_t{33}, kTokens}) {
              const auto batch = run(0, t, true);
              for (int64_t r = 0; r < t; ++r) {
                const auto& want = alone[static_cast<size_t>(r)];
                ASSERT_EQ(std::memcmp(batch.data() + r * kHidden, want.data(), want.size() * sizeof(float)),
                          0)
                    << nb.label << (decomposed ? " (decomposed)" : "") << ", " << weight_format_name(format)
                    << ", " << c.name << (exact ? ", exact" : ", not exact") << ": row " << r
                    << " of a call of " << t;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
