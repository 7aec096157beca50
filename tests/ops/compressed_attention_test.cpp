// Compressed attention: kv_compress (the compressors' gated pooling) and indexer_topk over compressed
// keys (key_ratio), against what transformers' DeepseekV4HCACompressor / DeepseekV4CSACompressor /
// DeepseekV4Indexer computed (tests/data/ops/compressed_attention.json, from
// tools/reference/make_op_fixtures.py), then every backend against the reference at odd sizes.
#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "day0/core/numeric.h"
#include "differential_harness.h"
#include "op_fixtures.h"

namespace day0::test {
namespace {

// Rows [row0, row0 + rows) of a row-major [*, cols] vector.
std::vector<float> rows_of(const std::vector<float>& v, int64_t cols, int64_t row0, int64_t rows) {
  return {v.begin() + row0 * cols, v.begin() + (row0 + rows) * cols};
}

// Columns [col0, col0 + n) of every row of a row-major [rows, cols] vector.
std::vector<float> cols_of(const std::vector<float>& v, int64_t cols, int64_t col0, int64_t n) {
  std::vector<float> out;
  for (size_t r = 0; r < v.size() / static_cast<size_t>(cols); ++r)
    out.insert(out.end(), v.begin() + static_cast<int64_t>(r) * cols + col0,
               v.begin() + static_cast<int64_t>(r) * cols + col0 + n);
  return out;
}

std::vector<float> pooled(Backend& be, const std::vector<float>& kv, const std::vector<float>& gate,
                          const std::vector<float>& bias, int64_t ratio, int64_t width, bool overlap,
                          const std::vector<float>& prior_kv = {},
                          const std::vector<float>& prior_gate = {}) {
  const auto rows = static_cast<int64_t>(kv.size()) / width;
  const int64_t d = overlap ? width / 2 : width;
  std::vector<float> out(static_cast<size_t>(rows / ratio * d));
  be.kv_compress({.kv = ConstMatrix(kv.data(), rows, width),
                  .gate = ConstMatrix(gate.data(), rows, width),
                  .position_bias = ConstMatrix(bias.data(), ratio, width),
                  .prior_kv = prior_kv.empty() ? ConstMatrix{} : ConstMatrix(prior_kv.data(), ratio, d),
                  .prior_gate = prior_gate.empty() ? ConstMatrix{} : ConstMatrix(prior_gate.data(), ratio, d),
                  .ratio = ratio,
                  .overlap = overlap,
                  .out = Matrix(out.data(), rows / ratio, d)});
  be.synchronize();
  return out;
}

TEST(KvCompress, MatchesTransformersCompressors) {
  const nlohmann::json f = op_fixture("compressed_attention");
  const int64_t d = f.at("head_dim"), di = f.at("index_head_dim"), m = f.at("csa_ratio"),
                mh = f.at("hca_ratio");
  const int64_t first_call = f.at("csa_calls")[0];
  constexpr double kTol = 1e-6;
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    Backend& be = *nb.backend;
    // Heavily compressed: two complete windows of 4 of the 9 tokens, no overlap.
    EXPECT_LT(error_of_range(pooled(be, rows_of(fixture_floats(f, "hca_kv"), d, 0, 2 * mh),
                                    rows_of(fixture_floats(f, "hca_gate"), d, 0, 2 * mh),
                                    fixture_floats(f, "hca_bias"), mh, d, false),
                             fixture_floats(f, "hca_pooled")),
              kTol);
    // Compressed sparse (the attention's and the indexer's own compressor): the first call's two
    // windows of 3 (the first overlapping nothing), then the held-back token and the second call's five,
    // the first window overlapping the first call's last one.
    for (const auto& [name, width] : {std::pair<std::string, int64_t>{"csa", 2 * d}, {"idx", 2 * di}}) {
      const auto kv0 = fixture_floats(f, (name + "_kv_0").c_str()),
                 gate0 = fixture_floats(f, (name + "_gate_0").c_str());
      const auto kv1 = fixture_floats(f, (name + "_kv_1").c_str()),
                 gate1 = fixture_floats(f, (name + "_gate_1").c_str());
      const auto bias = fixture_floats(f, (std::string(name == "csa" ? "csa" : "index") + "_bias").c_str());
      EXPECT_LT(error_of_range(pooled(be, rows_of(kv0, width, 0, 2 * m), rows_of(gate0, width, 0, 2 * m),
                                      bias, m, width, true),
                               fixture_floats(f, (name + "_pooled_0").c_str())),
                kTol)
          << name;
      std::vector<float> kv = rows_of(kv0, width, 2 * m, first_call - 2 * m),
                         gate = rows_of(gate0, width, 2 * m, first_call - 2 * m);
      kv.insert(kv.end(), kv1.begin(), kv1.end());
      gate.insert(gate.end(), gate1.begin(), gate1.end());
      // The previous window: the first call's rows 3..5, first halves, the gate with its bias.
      const auto prior_kv = cols_of(rows_of(kv0, width, m, m), width, 0, width / 2);
      auto prior_gate = cols_of(rows_of(gate0, width, m, m), width, 0, width / 2);
      const auto bias_first = cols_of(bias, width, 0, width / 2);
      for (size_t i = 0; i < prior_gate.size(); ++i) prior_gate[i] += bias_first[i];
      EXPECT_LT(error_of_range(pooled(be, kv, gate, bias, m, width, true, prior_kv, prior_gate),
                               fixture_floats(f, (name + "_pooled_1").c_str())),
                kTol)
          << name;
    }
  }
}

// A bfloat16 run (kv and gate in BF16, bias and softmax in float32): with bf16_steps the pooled
// entries are transformers' BF16 values, bit for bit where no float32 sum sits on a rounding boundary.
TEST(KvCompress, Bf16RunRoundsWhereTransformersRounds) {
  const nlohmann::json f = op_fixture("compressed_attention_bf16");
  ASSERT_EQ(f.at("pooled_dtype"), "torch.bfloat16");
  const int64_t d = f.at("head_dim");
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    for (const auto& [name, ratio, width] :
         {std::tuple<std::string, int64_t, int64_t>{"hca", f.at("hca_ratio"), d},
          {"csa", f.at("csa_ratio"), 2 * d}}) {
      const bool overlap = name == "csa";
      const auto kv = fixture_floats(f, (name + "_kv").c_str()),
                 gate = fixture_floats(f, (name + "_gate").c_str());
      const auto rows = static_cast<int64_t>(kv.size()) / width / ratio * ratio;  // complete windows
      const auto bias = fixture_floats(f, (name + "_bias").c_str());
      const auto want = fixture_floats(f, (name + "_pooled").c_str());
      const auto run = [&](bool bf16_steps) {
        std::vector<float> out(want.size());
        nb.backend->kv_compress({.kv = ConstMatrix(kv.data(), rows, width),
                                 .gate = ConstMatrix(gate.data(), rows, width),
                                 .position_bias = ConstMatrix(bias.data(), ratio, width),
                                 .ratio = ratio,
                                 .overlap = overlap,
                                 .out = Matrix(out.data(), rows / ratio, overlap ? width / 2 : width),
                                 .bf16_steps = bf16_steps});
        nb.backend->synchronize();
        return out;
      };
      const std::vector<float> got = run(true);
      size_t exact = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        exact += got[i] == want[i];
        EXPECT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) / 128) << name << " element " << i;
      }
      EXPECT_GE(exact * 10, want.size() * 9) << name;
      // float32 pooling rounded once is not what the bfloat16 run holds: the steps matter.
      std::vector<float> once = run(false);
      for (float& v : once) v = round_to_bf16(v);
      EXPECT_NE(once, want) << name;
    }
  }
}

// The lightning indexer over compressed keys: the selected sets of transformers' DeepseekV4Indexer
// wherever the choice does not hang on a tie; where it does (the query whose scores are all 0), the op
// says so and transformers' picks score as much as the op's.
TEST(IndexerTopk, CompressedKeysMatchTransformersWhereUnambiguous) {
  const nlohmann::json f = op_fixture("compressed_attention");
  const int64_t m = f.at("csa_ratio"), heads = f.at("index_n_heads"), di = f.at("index_head_dim");
  const int64_t k = f.at("index_topk");
  const float weights_scaling = f.at("weights_scaling"), scale = f.at("softmax_scale");
  int64_t pos0 = 0, ambiguous_rows = 0;
  for (int call = 0; call < 2; ++call) {
    const int64_t s = f.at("csa_calls")[call];
    const auto keys = fixture_floats(f, fmt::format("index_keys_{}", call).c_str());
    const auto q = fixture_floats(f, fmt::format("index_q_{}", call).c_str());
    auto weights = fixture_floats(f, fmt::format("index_weights_{}", call).c_str());
    for (float& w : weights) w *= weights_scaling;
    const auto want = fixture_ints(f, fmt::format("selected_{}", call).c_str());
    const auto want_scores = fixture_floats(f, fmt::format("index_scores_{}", call).c_str());
    const int64_t entries = static_cast<int64_t>(keys.size()) / di;
    const int64_t want_k = f.at(fmt::format("selected_shape_{}", call))[1];
    ContiguousKv store;
    const PagedSequence seq{0, s, pos0, store.pages(keys.data(), keys.data(), entries, di, di)};
    for (auto& nb : every_backend()) {
      SCOPED_TRACE(nb.label + fmt::format(" call {}", call));
      std::vector<int32_t> selected(static_cast<size_t>(s * k));
      std::vector<uint8_t> ambiguous(static_cast<size_t>(s));
      nb.backend->indexer_topk({.q = ConstMatrix(q.data(), s, heads * di),
                                .weights = ConstMatrix(weights.data(), s, heads),
                                .seqs = std::span<const PagedSequence>(&seq, 1),
                                .selected = {selected.data(), s, k},
                                .n_heads = heads,
                                .head_dim = di,
                                .scale = scale,
                                .key_ratio = m,
                                .ambiguous = ambiguous});
      nb.backend->synchronize();
      for (int64_t t = 0; t < s; ++t) {
        std::set<int32_t> got, theirs;
        for (int64_t j = 0; j < k; ++j)
          if (selected[static_cast<size_t>(t * k + j)] >= 0)
            got.insert(selected[static_cast<size_t>(t * k + j)]);
        for (int64_t j = 0; j < want_k; ++j)
          if (want[static_cast<size_t>(t * want_k + j)] >= 0)
            theirs.insert(want[static_cast<size_t>(t * want_k + j)]);
        ASSERT_EQ(got.size(), theirs.size()) << "row " << t;
        const float* row_scores = want_scores.data() + t * entries;
        if (ambiguous[static_cast<size_t>(t)] == 0) {
          EXPECT_EQ(got, theirs) << "row " << t;
          continue;
        }
        ambiguous_rows += nb.label == "reference";
        float lowest_ours = INFINITY;
        for (int32_t j : got) lowest_ours = std::min(lowest_ours, row_scores[j]);
        for (int32_t j : theirs) EXPECT_GE(row_scores[j], lowest_ours) << "row " << t << " key " << j;
      }
    }
    pos0 += s;
  }
  EXPECT_EQ(ambiguous_rows, 1);  // position 10, whose hidden state (hence weights) is zero
}

TEST(Differential, KvCompressEverySize) {
  Differential diff;
  struct Case {
    int64_t windows, ratio, d;
    bool overlap, prior;
  };
  for (const Case c : {Case{1, 4, 37, false, false}, Case{3, 128, 16, false, false},
                       Case{5, 4, 19, true, false}, Case{2, 4, 64, true, true}, Case{1, 3, 7, true, true}}) {
    const int64_t width = c.overlap ? 2 * c.d : c.d;
    GuardedMatrix kv(c.windows * c.ratio, width), gate(c.windows * c.ratio, width), bias(c.ratio, width);
    GuardedMatrix prior_kv(c.ratio, c.d), prior_gate(c.ratio, c.d);
    kv.fill_random(1);
    gate.fill_random(2, 4.0f);
    bias.fill_random(3);
    prior_kv.fill_random(4);
    prior_gate.fill_random(5, 4.0f);
    const std::string name = fmt::format("W={} m={} d={}{}{}", c.windows, c.ratio, c.d,
                                         c.overlap ? " overlap" : "", c.prior ? " prior" : "");
    for (const bool bf16 : {false, true}) {
      diff.check("kv_compress", name + (bf16 ? " bf16 steps" : ""), c.windows, c.d,
                 bf16 ? kTolBf16Activations : kTolFloat, [&](Backend& be, GuardedMatrix& out) {
                   be.kv_compress({.kv = kv.cview(),
                                   .gate = gate.cview(),
                                   .position_bias = bias.cview(),
                                   .prior_kv = c.prior ? prior_kv.cview() : ConstMatrix{},
                                   .prior_gate = c.prior ? prior_gate.cview() : ConstMatrix{},
                                   .ratio = c.ratio,
                                   .overlap = c.overlap,
                                   .out = out.view(),
                                   .bf16_steps = bf16});
                   be.synchronize();
                 });
    }
  }
  diff.finish();
}

// Compressed keys on every backend: the same picks and the same ambiguity flags as the reference,
// decode and prefill, queries seeing fewer entries than the last one, scores tied at 0 (zero weights).
TEST(IndexerTopk, CompressedKeysEveryBackend) {
  auto ref = reference_backend();
  auto backends = backends_under_test();
  const int64_t heads = 3, d = 16, ratio = 4, k = 3, entries = 9;
  for (const int64_t t : {1, 7}) {
    GuardedMatrix q(t, heads * d), weights(t, heads);
    q.fill_random(7);
    weights.fill_random(8);
    for (int64_t h = 0; h < heads; ++h) weights.view().row(t - 1)[h] = 0.0f;  // the last query: all tie
    const auto keys = random_vector(entries * d, 9);
    ContiguousKv store;
    const int64_t pos0 = entries * ratio - t - 1;  // the last query sees every entry, earlier ones fewer
    const PagedSequence seq{0, t, pos0, store.pages(keys.data(), keys.data(), entries, d, d)};
    auto run = [&](Backend& be, std::vector<int32_t>& selected, std::vector<uint8_t>& ambiguous) {
      selected.assign(static_cast<size_t>(t * k), 7);
      ambiguous.assign(static_cast<size_t>(t), 7);
      be.indexer_topk({.q = q.cview(),
                       .weights = weights.cview(),
                       .seqs = std::span<const PagedSequence>(&seq, 1),
                       .selected = {selected.data(), t, k},
                       .n_heads = heads,
                       .head_dim = d,
                       .scale = 0.25f,
                       .key_ratio = ratio,
                       .ambiguous = ambiguous});
      be.synchronize();
    };
    std::vector<int32_t> want;
    std::vector<uint8_t> want_ambiguous;
    run(*ref, want, want_ambiguous);
    EXPECT_EQ(want_ambiguous.back(), 1) << "zero weights tie every score";
    for (auto& nb : backends) {
      std::vector<int32_t> got;
      std::vector<uint8_t> got_ambiguous;
      run(*nb.backend, got, got_ambiguous);
      EXPECT_EQ(got, want) << "T=" << t << " on " << nb.label;
      EXPECT_EQ(got_ambiguous, want_ambiguous) << "T=" << t << " on " << nb.label;
    }
  }
}

}  // namespace
}  // namespace day0::test
