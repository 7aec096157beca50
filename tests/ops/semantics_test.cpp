// Op semantics on small hand-worked vectors, written once and run on every backend (reference, every
// cpu SIMD level, partial behind the resolver).
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "day0/core/numeric.h"
#include "day0/ops/rope_table.h"
#include "op_test_support.h"

namespace day0::test {
namespace {

class Semantics : public ::testing::Test {
 protected:
  void SetUp() override {
    backends_ = backends_under_test();
    backends_.push_back({"reference", reference_backend()});
  }
  std::vector<NamedBackend> backends_;
};

TEST_F(Semantics, MatmulWithBias) {
  const float x[] = {1, 2, 3, -1, 0, 2};     // [2, 3]
  const float w[] = {1, 0, -1, 0.5f, 2, 1};  // [2, 3]
  const float b[] = {10, -10};
  WeightView wv{WeightFormat::kF32, 2, 3, w};
  for (auto& nb : backends_) {
    float y[4] = {};
    nb.backend->matmul({.x = {x, 2, 3}, .w = wv, .bias = b, .y = {y, 2, 2}});
    EXPECT_FLOAT_EQ(y[0], 1 - 3 + 10) << nb.label;
    EXPECT_FLOAT_EQ(y[1], 0.5f + 4 + 3 - 10) << nb.label;
    EXPECT_FLOAT_EQ(y[2], -1 - 2 + 10) << nb.label;
    EXPECT_FLOAT_EQ(y[3], -0.5f + 2 - 10) << nb.label;
  }
}

TEST_F(Semantics, QuantisedWeightDecoding) {
  // FP8 0x38 = 1.0, 0xC0 = -2.0, block scale 0.5. MXFP4 byte 0x21: element 0 = fp4(1) = 0.5,
  // element 1 = fp4(2) = 1.0; scale byte 128 = 2^1.
  std::vector<uint8_t> fp8(128, 0);
  fp8[0] = 0x38;
  fp8[1] = 0xC0;
  const float fp8_scale = 0.5f;
  WeightView w8{WeightFormat::kFp8Block, 1, 128, fp8.data(), &fp8_scale};
  std::vector<uint8_t> fp4(16, 0);
  fp4[0] = 0x21;
  const uint8_t mx_scale = 128;
  WeightView w4{WeightFormat::kMxfp4, 1, 32, fp4.data(), &mx_scale};
  EXPECT_FLOAT_EQ(w8.at(0, 0), 0.5f);
  EXPECT_FLOAT_EQ(w8.at(0, 1), -1.0f);
  EXPECT_FLOAT_EQ(w4.at(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(w4.at(0, 1), 2.0f);
  std::vector<float> x(128, 0.0f);
  x[0] = 3.0f;
  x[1] = 5.0f;
  for (auto& nb : backends_) {
    float y = 0;
    nb.backend->matmul({.x = {x.data(), 1, 128}, .w = w8, .y = {&y, 1, 1}});
    EXPECT_FLOAT_EQ(y, 3 * 0.5f - 5 * 1.0f) << nb.label;
    nb.backend->matmul({.x = {x.data(), 1, 32}, .w = w4, .y = {&y, 1, 1}});
    EXPECT_FLOAT_EQ(y, 3 * 1.0f + 5 * 2.0f) << nb.label;
  }
}

// Regression: the AVX2 / AVX-512 FP8 decode turned the E4M3 NaN codes (0x7f, 0xff) into +-480, so a
// corrupt FP8 shard gave finite, wrong output. Every backend and SIMD level, one token (GEMV) and
// several (GEMM), must give NaN exactly in the rows that hold a NaN code.
TEST_F(Semantics, Fp8NanCodesDecodeToNan) {
  constexpr int64_t kRows = 4, kCols = 256;
  std::vector<uint8_t> w(static_cast<size_t>(kRows * kCols), 0x38);  // [4, 256] fp8, every weight 1.0
  w[0 * kCols + 3] = 0x7f;                                           // row 0: +NaN code
  w[1 * kCols + 200] = 0xff;                                         // row 1: -NaN code
  w[2 * kCols + 17] = 0x7e;                                          // row 2: 448, the largest finite
  const float scales[2] = {0.5f, 0.5f};                              // [1, 2] block scales
  WeightView wv{WeightFormat::kFp8Block, kRows, kCols, w.data(), scales};
  EXPECT_TRUE(std::isnan(wv.at(0, 3)));
  EXPECT_TRUE(std::isnan(wv.at(1, 200)));
  for (const int64_t tokens : {int64_t{1}, int64_t{8}}) {
    std::vector<float> x(static_cast<size_t>(tokens * kCols), 1.0f);  // [tokens, 256]
    for (auto& nb : backends_) {
      std::vector<float> y(static_cast<size_t>(tokens * kRows), 0.0f);  // [tokens, 4]
      nb.backend->matmul({.x = {x.data(), tokens, kCols}, .w = wv, .y = {y.data(), tokens, kRows}});
      for (int64_t t = 0; t < tokens; ++t) {
        const float* row = y.data() + t * kRows;
        EXPECT_TRUE(std::isnan(row[0])) << nb.label << " tokens " << tokens << ": " << row[0];
        EXPECT_TRUE(std::isnan(row[1])) << nb.label << " tokens " << tokens << ": " << row[1];
        EXPECT_FLOAT_EQ(row[2], 0.5f * (255 + 448)) << nb.label << " tokens " << tokens;
        EXPECT_FLOAT_EQ(row[3], 0.5f * 256) << nb.label << " tokens " << tokens;
      }
    }
  }
}

TEST_F(Semantics, RmsNormAndSoftmax) {
  const float x[] = {3, 4};  // rms = sqrt(12.5)
  const float w[] = {2, 1};
  for (auto& nb : backends_) {
    float y[2];
    nb.backend->rms_norm({{x, 1, 2}, w, 0.0f, {y, 1, 2}});
    EXPECT_NEAR(y[0], 2 * 3 / std::sqrt(12.5f), 1e-6) << nb.label;
    EXPECT_NEAR(y[1], 4 / std::sqrt(12.5f), 1e-6) << nb.label;
    float s[2] = {0.0f, std::log(3.0f)};
    nb.backend->softmax({{s, 1, 2}});
    EXPECT_NEAR(s[0], 0.25f, 1e-6) << nb.label;
    EXPECT_NEAR(s[1], 0.75f, 1e-6) << nb.label;
  }
}

// softplus(x) = log(1 + e^x): log 2 at 0, log(1 + e) at 1, and x itself past torch's threshold of 20.
TEST_F(Semantics, SoftplusOfAnAttentionGate) {
  const float x[] = {0.0f, 1.0f, -30.0f, 25.0f};
  for (auto& nb : backends_) {
    float y[4];
    nb.backend->softplus({{x, 1, 4}, {y, 1, 4}});
    EXPECT_NEAR(y[0], std::log(2.0f), 1e-6) << nb.label;
    EXPECT_NEAR(y[1], std::log1p(std::exp(1.0f)), 1e-6) << nb.label;
    EXPECT_NEAR(y[2], std::exp(-30.0f), 1e-18) << nb.label;
    EXPECT_EQ(y[3], 25.0f) << nb.label;
  }
}

// tanh, as logit soft-capping uses it (c tanh(x / c)): odd, 0 at 0, tanh(1) = (e^2 - 1) / (e^2 + 1), and
// saturated at +-1 far out.
TEST_F(Semantics, TanhOfSoftCappedLogits) {
  const float x[] = {0.0f, 1.0f, -1.0f, 40.0f};
  for (auto& nb : backends_) {
    float y[4];
    nb.backend->tanh({{x, 1, 4}, {y, 1, 4}});
    const double e2 = std::exp(2.0);
    EXPECT_EQ(y[0], 0.0f) << nb.label;
    EXPECT_NEAR(y[1], (e2 - 1.0) / (e2 + 1.0), 1e-6) << nb.label;
    EXPECT_EQ(y[2], -y[1]) << nb.label;
    EXPECT_EQ(y[3], 1.0f) << nb.label;
  }
}

// Proportional RoPE (Gemma 4's full layers): frequencies over the whole head, only the first share of them
// non-zero, so that the rotated pairs (i, i + d / 2) are those of ordinary RoPE over d and the others pass.
TEST_F(Semantics, ProportionalRopeRotatesTheLeadingFrequenciesOfTheWholeHead) {
  RopeScaling scaling;
  scaling.type = RopeType::kProportional;
  scaling.proportional_share = 0.25;
  auto f = rope_frequencies(10000.0, 16, scaling, 4096);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto plain = rope_frequencies(10000.0, 16, RopeScaling{}, 4096);
  ASSERT_TRUE(plain.is_ok());
  ASSERT_EQ(f->inv_freq.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(f->inv_freq[i], i < 2 ? plain->inv_freq[i] : 0.0f) << i;
  scaling.factor = 2.0;  // divides the rotated frequencies
  auto scaled = rope_frequencies(10000.0, 16, scaling, 4096);
  ASSERT_TRUE(scaled.is_ok());
  EXPECT_FLOAT_EQ(scaled->inv_freq[1], plain->inv_freq[1] / 2.0f);
  const int64_t pos[] = {3};
  for (auto& nb : backends_) {
    float x[16];
    for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i + 1);
    nb.backend->rope({{x, 1, 16}, pos, 1, 16, 16, RopeLayout::kHalfSplit, f->inv_freq, 1.0f});
    for (int i = 2; i < 8; ++i) {  // zero frequencies: both halves of the pair as they were
      EXPECT_EQ(x[i], static_cast<float>(i + 1)) << nb.label;
      EXPECT_EQ(x[i + 8], static_cast<float>(i + 9)) << nb.label;
    }
    const double a = 3.0 * f->inv_freq[1];  // pair (1, 9): (2, 10) rotated by 3 f_1
    EXPECT_NEAR(x[1], 2.0 * std::cos(a) - 10.0 * std::sin(a), 1e-5) << nb.label;
    EXPECT_NEAR(x[9], 10.0 * std::cos(a) + 2.0 * std::sin(a), 1e-5) << nb.label;
  }
}

TEST_F(Semantics, RopeRotatesPairsOfTheChosenLayout) {
  const float inv_freq[] = {1.0f, 0.0f};
  const int64_t pos[] = {1};
  for (auto& nb : backends_) {
    // Half-split: pairs (0, 2) and (1, 3).
    float x[4] = {1, 0, 0, 0};
    nb.backend->rope({.x = {x, 1, 4},
                      .positions = pos,
                      .n_heads = 1,
                      .head_dim = 4,
                      .rotary_dim = 4,
                      .layout = RopeLayout::kHalfSplit,
                      .inv_freq = inv_freq});
    EXPECT_NEAR(x[0], std::cos(1.0f), 1e-6) << nb.label;
    EXPECT_NEAR(x[2], std::sin(1.0f), 1e-6) << nb.label;
    EXPECT_NEAR(x[1], 0.0f, 1e-6) << nb.label;
    // Interleaved: pairs (0, 1) and (2, 3).
    float z[4] = {1, 0, 0, 0};
    nb.backend->rope({.x = {z, 1, 4},
                      .positions = pos,
                      .n_heads = 1,
                      .head_dim = 4,
                      .rotary_dim = 4,
                      .layout = RopeLayout::kInterleaved,
                      .inv_freq = inv_freq});
    EXPECT_NEAR(z[0], std::cos(1.0f), 1e-6) << nb.label;
    EXPECT_NEAR(z[1], std::sin(1.0f), 1e-6) << nb.label;
    EXPECT_NEAR(z[2], 0.0f, 1e-6) << nb.label;
    // Partial rotary: dims >= rotary_dim pass through.
    const float one[] = {1.0f};
    float p[4] = {1, 0, 7, 9};
    nb.backend->rope(
        {.x = {p, 1, 4}, .positions = pos, .n_heads = 1, .head_dim = 4, .rotary_dim = 2, .inv_freq = one});
    EXPECT_NEAR(p[1], std::sin(1.0f), 1e-6) << nb.label;
    EXPECT_EQ(p[2], 7.0f) << nb.label;
    EXPECT_EQ(p[3], 9.0f) << nb.label;
  }
}

TEST_F(Semantics, AttentionSinkAndSlidingWindow) {
  // One key with score 0 and a sink logit 0: p = 1/2, so out = v / 2.
  const float q[] = {0, 0};
  const float k[] = {1, 1};
  const float v[] = {4, -2};
  const float sink[] = {0.0f};
  // Sliding window 2 at query position 3 sees keys 2 and 3 only; equal scores, one-hot values.
  const float q2[] = {0};
  const float k2[] = {0, 0, 0, 0};
  const float v2[] = {1000, 100, 10, 1};
  for (auto& nb : backends_) {
    float out[2];
    nb.backend->attention({.q = {q, 1, 2},
                           .k = {k, 1, 2},
                           .v = {v, 1, 2},
                           .out = {out, 1, 2},
                           .n_heads = 1,
                           .n_kv_heads = 1,
                           .head_dim = 2,
                           .sinks = sink});
    EXPECT_NEAR(out[0], 2.0f, 1e-6) << nb.label;
    EXPECT_NEAR(out[1], -1.0f, 1e-6) << nb.label;
    float o2;
    nb.backend->attention({.q = {q2, 1, 1},
                           .k = {k2, 4, 1},
                           .v = {v2, 4, 1},
                           .out = {&o2, 1, 1},
                           .n_heads = 1,
                           .n_kv_heads = 1,
                           .head_dim = 1,
                           .q_pos0 = 3,
                           .mask = AttentionMask::kSliding,
                           .window = 2});
    EXPECT_NEAR(o2, 5.5f, 1e-4) << nb.label;
    nb.backend->attention({.q = {q2, 1, 1},
                           .k = {k2, 4, 1},
                           .v = {v2, 4, 1},
                           .out = {&o2, 1, 1},
                           .n_heads = 1,
                           .n_kv_heads = 1,
                           .head_dim = 1,
                           .q_pos0 = 2,
                           .mask = AttentionMask::kChunked,
                           .window = 2});
    EXPECT_NEAR(o2, 10.0f, 1e-4) << nb.label;  // chunk [2, 3], causal: only key 2
  }
}

TEST_F(Semantics, RouterExpertScaleWeighsAfterTheNormalization) {
  // Softmax of {0, 0, 2, -2}, top-2 = experts 2 and 0, renormalized to {e^2, 1} / (e^2 + 1), then each
  // times its own expert's scale (which does not change the picks).
  const float logits[] = {0, 0, 2, -2};
  const float scale[] = {3.0f, 0.1f, 0.5f, 100.0f};
  for (auto& nb : backends_) {
    int32_t ids[2];
    float w[2];
    nb.backend->moe_router({.logits = {logits, 1, 4},
                            .top_k = 2,
                            .norm_topk_prob = true,
                            .expert_scale = scale,
                            .expert_ids = {ids, 1, 2},
                            .expert_weights = {w, 1, 2}});
    EXPECT_EQ(ids[0], 2) << nb.label;
    EXPECT_EQ(ids[1], 0) << nb.label;
    EXPECT_NEAR(w[0], 0.5f * std::exp(2.0f) / (std::exp(2.0f) + 1.0f), 1e-6) << nb.label;
    EXPECT_NEAR(w[1], 3.0f / (std::exp(2.0f) + 1.0f), 1e-6) << nb.label;
  }
}

TEST_F(Semantics, RouterBiasSelectsButDoesNotWeigh) {
  // Sigmoid scores of logits {0, 0, 2, -2}; a bias of +10 on expert 3 makes it win the selection,
  // but its weight is its unbiased score sigmoid(-2).
  const float logits[] = {0, 0, 2, -2};
  const float bias[] = {0, 0, 0, 10};
  for (auto& nb : backends_) {
    int32_t ids[2];
    float w[2];
    nb.backend->moe_router({.logits = {logits, 1, 4},
                            .correction_bias = bias,
                            .scoring = RouterScoring::kSigmoid,
                            .method = TopkMethod::kNoauxTc,
                            .top_k = 2,
                            .routed_scaling_factor = 2.0f,
                            .expert_ids = {ids, 1, 2},
                            .expert_weights = {w, 1, 2}});
    EXPECT_EQ(ids[0], 3) << nb.label;
    EXPECT_EQ(ids[1], 2) << nb.label;
    EXPECT_NEAR(w[0], 2.0f / (1.0f + std::exp(2.0f)), 1e-6) << nb.label;
    EXPECT_NEAR(w[1], 2.0f / (1.0f + std::exp(-2.0f)), 1e-6) << nb.label;
    // gpt-oss: top-2 of the logits, softmax over the two selected: {2, 0} -> {e^2, 1} / (e^2 + 1).
    nb.backend->moe_router({.logits = {logits, 1, 4},
                            .method = TopkMethod::kLogitsThenSoftmax,
                            .top_k = 2,
                            .expert_ids = {ids, 1, 2},
                            .expert_weights = {w, 1, 2}});
    EXPECT_EQ(ids[0], 2) << nb.label;
    EXPECT_EQ(ids[1], 0) << nb.label;  // tie between experts 0 and 1: lower index
    EXPECT_NEAR(w[0], std::exp(2.0f) / (std::exp(2.0f) + 1.0f), 1e-6) << nb.label;
  }
}

TEST_F(Semantics, ClampedSwigluOfGptOss) {
  const float gate[] = {10.0f, -1.0f};
  const float up[] = {-9.0f, 0.5f};
  for (auto& nb : backends_) {
    float out[2];
    nb.backend->swiglu_clamped({.gate = {gate, 1, 2}, .up = {up, 1, 2}, .out = {out, 1, 2}});
    const float g0 = 7.0f;
    EXPECT_NEAR(out[0], (-7.0f + 1.0f) * g0 / (1.0f + std::exp(-1.702f * g0)), 1e-5) << nb.label;
    EXPECT_NEAR(out[1], 1.5f * -1.0f / (1.0f + std::exp(1.702f)), 1e-6) << nb.label;
  }
}

TEST_F(Semantics, ArgmaxTiesAndSampling) {
  const float x[] = {1, 5, 5, 2};
  std::vector<float> even(2, 0.0f);  // two equally likely tokens
  for (auto& nb : backends_) {
    int32_t i;
    nb.backend->argmax({{x, 1, 4}, {&i, 1}});
    EXPECT_EQ(i, 1) << nb.label;
    nb.backend->sample({{x, 1, 4}, 0.0f, 1.0f, 0, 7, {&i, 1}});
    EXPECT_EQ(i, 1) << nb.label;  // temperature 0 is argmax
    int ones = 0;
    for (uint64_t seed = 0; seed < 400; ++seed) {
      nb.backend->sample({{even.data(), 1, 2}, 1.0f, 1.0f, 0, seed, {&i, 1}});
      ones += i;
    }
    EXPECT_GT(ones, 150) << nb.label;
    EXPECT_LT(ones, 250) << nb.label;
    nb.backend->sample({{x, 1, 4}, 1.0f, 0.01f, 0, 3, {&i, 1}});
    EXPECT_TRUE(i == 1 || i == 2) << nb.label;  // a tiny nucleus keeps only the top token
  }
}

}  // namespace
}  // namespace day0::test
