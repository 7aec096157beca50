// DeepSeek-V4's routing through moe_router: sqrtsoftplus scores with the correction bias for the
// selection only, and hash routing (experts from a token-id table), against what transformers'
// DeepseekV4TopKRouter / DeepseekV4HashRouter returned (tests/data/ops/router_sqrtsoftplus.json, from
// tools/reference/make_op_fixtures.py), then every backend against the reference at odd sizes.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "differential_harness.h"
#include "op_fixtures.h"

namespace day0::test {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(Backend& be, const std::vector<float>& logits, int64_t t, int64_t e, int64_t k,
             std::span<const float> bias, float scaling, MatrixView<const int32_t> table = {},
             std::span<const int32_t> token_ids = {}) {
  Routed r{std::vector<int32_t>(static_cast<size_t>(t * k), -1),
           std::vector<float>(static_cast<size_t>(t * k))};
  be.moe_router({.logits = ConstMatrix(logits.data(), t, e),
                 .correction_bias = bias,
                 .scoring = RouterScoring::kSqrtSoftplus,
                 .method = TopkMethod::kNoauxTc,  // one group: top-k of the scores plus the bias
                 .top_k = k,
                 .norm_topk_prob = true,
                 .renorm_eps = 1e-20f,
                 .routed_scaling_factor = scaling,
                 .expert_ids = {r.ids.data(), t, k},
                 .expert_weights = {r.weights.data(), t, k},
                 .hash_table = table,
                 .token_ids = token_ids});
  be.synchronize();
  return r;
}

// Expert id -> weight of each token: torch.topk(sorted=False) leaves the order of the picks open.
std::vector<std::map<int32_t, float>> picks(const std::vector<int32_t>& ids, const std::vector<float>& w,
                                            int64_t k) {
  std::vector<std::map<int32_t, float>> out(ids.size() / static_cast<size_t>(k));
  for (size_t i = 0; i < ids.size(); ++i) out[i / static_cast<size_t>(k)][ids[i]] = w[i];
  return out;
}

TEST(RouterSqrtSoftplus, MatchesTransformersTopKAndHashRouters) {
  const nlohmann::json f = op_fixture("router_sqrtsoftplus");
  const int64_t t = f.at("tokens"), h = f.at("hidden"), e = f.at("experts"), k = f.at("top_k");
  const int64_t vocab = f.at("vocab");
  const float scaling = f.at("routed_scaling_factor");
  const auto x = fixture_floats(f, "x"), weight = fixture_floats(f, "weight");
  const auto bias = fixture_floats(f, "correction_bias");
  const auto tid2eid = fixture_ints(f, "tid2eid"), input_ids = fixture_ints(f, "input_ids");
  const auto want = picks(fixture_ints(f, "expert_ids"), fixture_floats(f, "expert_weights"), k);
  const auto want_hash_ids = fixture_ints(f, "hash_expert_ids");
  const auto want_hash_weights = fixture_floats(f, "hash_expert_weights");
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    Backend& be = *nb.backend;
    std::vector<float> logits(static_cast<size_t>(t * e));
    be.matmul({.x = ConstMatrix(x.data(), t, h),
               .w = WeightView{.format = WeightFormat::kF32, .rows = e, .cols = h, .data = weight.data()},
               .y = Matrix(logits.data(), t, e)});
    be.synchronize();
    EXPECT_LT(error_of_range(logits, fixture_floats(f, "logits")), 1e-6);
    const Routed topk = route(be, logits, t, e, k, bias, scaling);
    const auto got = picks(topk.ids, topk.weights, k);
    for (int64_t tok = 0; tok < t; ++tok) {
      ASSERT_EQ(got[static_cast<size_t>(tok)].size(), want[static_cast<size_t>(tok)].size())
          << "token " << tok;
      for (const auto& [id, w] : want[static_cast<size_t>(tok)]) {
        ASSERT_TRUE(got[static_cast<size_t>(tok)].contains(id)) << "token " << tok << " lacks expert " << id;
        EXPECT_NEAR(got[static_cast<size_t>(tok)].at(id), w, 1e-6f * scaling) << "token " << tok;
      }
    }
    // Hash routing: the table's experts in the table's order; the correction bias plays no part.
    const Routed hashed = route(be, logits, t, e, k, bias, scaling, {tid2eid.data(), vocab, k}, input_ids);
    EXPECT_EQ(hashed.ids, want_hash_ids);
    EXPECT_LT(error_of_range(hashed.weights, want_hash_weights), 1e-6);
  }
}

TEST(Differential, RouterSqrtSoftplusAndHashEverySize) {
  auto ref = reference_backend();
  auto backends = backends_under_test();
  struct Case {
    int64_t t, e, k;
  };
  for (const Case c : {Case{1, 67, 5}, Case{9, 256, 6}, Case{4, 7, 7}}) {
    const std::string name = fmt::format("T={} E={} k={}", c.t, c.e, c.k);
    GuardedMatrix logits_m(c.t, c.e);
    logits_m.fill_random(static_cast<uint64_t>(c.e), 30.0f);  // past softplus's threshold of 20 too
    const std::vector<float> logits = logits_m.values();
    const auto bias = random_vector(c.e, 3, 0.5f);
    const int64_t vocab = 31;
    std::vector<int32_t> table(static_cast<size_t>(vocab * c.k)), ids(static_cast<size_t>(c.t));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 17 + i / 3) % c.e);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 11 + 5) % vocab);
    for (bool hashed : {false, true}) {
      const MatrixView<const int32_t> tv =
          hashed ? MatrixView<const int32_t>{table.data(), vocab, c.k} : MatrixView<const int32_t>{};
      const std::span<const int32_t> tok =
          hashed ? std::span<const int32_t>(ids) : std::span<const int32_t>();
      const Routed want = route(*ref, logits, c.t, c.e, c.k, bias, 2.5f, tv, tok);
      for (auto& nb : backends) {
        const Routed got = route(*nb.backend, logits, c.t, c.e, c.k, bias, 2.5f, tv, tok);
        EXPECT_EQ(got.ids, want.ids) << name << (hashed ? " hashed" : "") << " on " << nb.label;
        EXPECT_LT(nmse(got.weights, want.weights), kTolFloat) << name << " on " << nb.label;
      }
    }
  }
}

}  // namespace
}  // namespace day0::test
