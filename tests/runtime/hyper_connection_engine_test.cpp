// Hyper-connections and hash routing in the engine, over the blocks of an existing golden (Qwen3-MoE): the
// hyper-connection recipe (n streams collapsed before each block, its output expanded back over them) with
// mixes that make every stream the plain residual reproduces the one-stream model, and other mixes do not;
// a hash-routed layer's picks are its table's rows of the step's token ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "day0/align/align_runner.h"
#include "day0/model/catalog.h"
#include "golden.h"

namespace day0::testing {
namespace {

constexpr int64_t kStreams = 4;
constexpr double kHcEps = 1e-6;

// Hyper-connection weights of n streams with fn = 0, so that the mixes are the biases alone:
// pre = sigmoid(b_pre) + eps = 1 / n (n equal streams collapse into one of them), post = 2 sigmoid(b_post),
// comb = Sinkhorn(uniform) = 1 / n up to eps (every stream keeps the mean of the streams).
struct BiasOnlyHc {
  std::vector<float> fn, base,
      scale;  // [(2 + n) n, n H] zeros (or [n, n H]), [(2 + n) n] (or [n]), [3] (or [1])
  BiasOnlyHc(int64_t hidden, bool head, double post) {
    const int64_t outputs = head ? kStreams : (2 + kStreams) * kStreams;
    fn.assign(static_cast<size_t>(outputs * kStreams * hidden), 0.0f);
    base.assign(static_cast<size_t>(outputs), 0.0f);
    scale.assign(head ? 1 : 3, 1.0f);
    const double pre = 1.0 / kStreams - kHcEps;
    std::fill_n(base.begin(), kStreams, static_cast<float>(std::log(pre / (1.0 - pre))));
    if (!head)
      std::fill_n(base.begin() + kStreams, kStreams, static_cast<float>(std::log(post / (2.0 - post))));
  }
  HyperConnectionWeights view() const {
    HyperConnectionWeights w;
    w.fn.w = WeightView{.format = WeightFormat::kF32,
                        .rows = static_cast<int64_t>(base.size()),
                        .cols = static_cast<int64_t>(fn.size() / base.size()),
                        .data = fn.data()};
    w.base = base;
    w.scale = scale;
    return w;
  }
};

FloatMatrix prefill_logits(Engine& e, std::span<const int32_t> ids) {
  KvCache cache = e.new_cache();
  const SequenceStep s{&cache, ids};
  auto logits = e.forward(std::span(&s, 1));
  D0_CHECK_MSG(logits.is_ok(), logits.status().to_string());
  return copy_matrix(*logits);
}

double max_abs_diff(const FloatMatrix& a, const FloatMatrix& b) {
  double m = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data[i]) - b.data[i]));
  return m;
}

double range_of(const FloatMatrix& m) {
  const auto [lo, hi] = std::minmax_element(m.data.begin(), m.data.end());
  return *hi - *lo;
}

const std::vector<int32_t> kPrompt = {1, 17, 200, 5, 93, 42, 7, 255, 64, 3};

// The golden's model over n hyper-connected streams whose mixes are the biases alone, post = `post`.
FloatMatrix logits_over_streams(GoldenRun& run, double post, const EngineOptions& options,
                                std::vector<std::unique_ptr<BiasOnlyHc>>& keep) {
  ModelSpec spec = run.model.spec;
  spec.hyper_connections = HyperConnectionSpec{.streams = kStreams, .sinkhorn_iters = 20, .eps = kHcEps};
  spec.family = "deepseek_v4";  // the family whose registrar names the hyper-connection recipe
  auto weights = std::make_shared<ModelWeights>(*run.model.weights);
  const int64_t hidden = spec.hidden_size;
  for (LayerWeights& lw : weights->layers) {
    keep.push_back(std::make_unique<BiasOnlyHc>(hidden, false, post));
    lw.attn_hc = keep.back()->view();
    lw.ffn_hc = keep.back()->view();
  }
  keep.push_back(std::make_unique<BiasOnlyHc>(hidden, true, post));
  weights->hc_head = keep.back()->view();
  auto engine = Engine::create(spec, weights, *run.backend, options);
  D0_CHECK_MSG(engine.is_ok(), engine.status().to_string());
  return prefill_logits(**engine, kPrompt);
}

TEST(HyperConnections, StreamsThatAreTheResidualReproduceTheOneStreamModel) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_golden("qwen3-moe", "cpu", exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const FloatMatrix plain = prefill_logits(*run->engine, kPrompt);
  std::vector<std::unique_ptr<BiasOnlyHc>> keep;
  const FloatMatrix streams = logits_over_streams(*run, 1.0, exact, keep);
  // Off only by the eps of pre and of Sinkhorn's sums (1e-6 a mix, four blocks).
  EXPECT_LE(max_abs_diff(plain, streams), 1e-4 * range_of(plain));
  // post = 1.5 adds each block's output one and a half times: the streams are what carries the residual.
  const FloatMatrix scaled = logits_over_streams(*run, 1.5, exact, keep);
  EXPECT_GT(max_abs_diff(plain, scaled), 1e-2 * range_of(plain));
}

TEST(HyperConnections, TheEngineRefusesStreamsWithoutTheirWeights) {
  auto run = open_golden("qwen3-moe");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ModelSpec spec = run->model.spec;
  spec.hyper_connections = HyperConnectionSpec{.streams = kStreams, .sinkhorn_iters = 20, .eps = kHcEps};
  spec.family = "deepseek_v4";
  auto engine = Engine::create(spec, run->model.weights, *run->backend);
  ASSERT_FALSE(engine.is_ok());
  EXPECT_NE(engine.status().message().find("hyper-connection weights"), std::string::npos)
      << engine.status().to_string();
  // The standard recipe would read the n streams as one.
  spec.family = run->model.spec.family;
  engine = Engine::create(spec, run->model.weights, *run->backend);
  ASSERT_FALSE(engine.is_ok());
  EXPECT_NE(engine.status().message().find("only a collapse reads"), std::string::npos)
      << engine.status().to_string();
}

// Layer 0 routed by a token-id table: every token's picks are its row, whatever the router scores.
TEST(HashRouting, PicksAreTheTableRowsOfTheTokenIds) {
  auto run = open_golden("qwen3-moe");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ModelSpec spec = run->model.spec;
  const int64_t experts = spec.moe->n_experts, k = spec.moe->experts_per_token;
  ASSERT_EQ(k, 2);
  spec.layers[0].hash_routed = true;
  auto weights = std::make_shared<ModelWeights>(*run->model.weights);
  EngineOptions counting;
  counting.count_expert_picks = true;
  auto refused = Engine::create(spec, weights, *run->backend, counting);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("token -> experts table"), std::string::npos)
      << refused.status().to_string();

  std::vector<int32_t> table(static_cast<size_t>(spec.vocab_size * k));  // [vocab, 2]: v % E, (3 v + 1) % E
  for (int64_t v = 0; v < spec.vocab_size; ++v) {
    table[static_cast<size_t>(v * k)] = static_cast<int32_t>(v % experts);
    table[static_cast<size_t>(v * k + 1)] = static_cast<int32_t>((3 * v + 1) % experts);
  }
  weights->layers[0].moe.hash_table = MatrixView<const int32_t>(table.data(), spec.vocab_size, k);
  auto engine = Engine::create(spec, weights, *run->backend, counting);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  (void)prefill_logits(**engine, kPrompt);
  std::vector<int64_t> want(static_cast<size_t>(experts), 0);
  for (int32_t id : kPrompt)
    for (int64_t j = 0; j < k; ++j) ++want[static_cast<size_t>(table[static_cast<size_t>(id * k + j)])];
  const ExpertPickCounts& picks = (*engine)->expert_picks();
  ASSERT_GE(picks.routed.size(), 2u);
  EXPECT_EQ(picks.routed[0], want);
  // The next layer still routes by its router: other picks than the table's for these tokens.
  EXPECT_NE(picks.routed[1], want);
}

// DeepSeek-V4's golden reference and the F32 engine's dump of the same prompts (an F32 KV cache).
struct V4Dumps {
  ReferenceDump reference, engine;
};

V4Dumps v4_f32_dumps() {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_golden("deepseek-v4", "cpu", exact);
  EXPECT_TRUE(run.is_ok()) << run.status().to_string();
  if (!run.is_ok()) return {};
  auto mine = run_reference_prompts(*run->engine, run->reference, "test");
  EXPECT_TRUE(mine.is_ok()) << mine.status().to_string();
  if (!mine.is_ok()) return {};
  return {std::move(run->reference), std::move(*mine)};
}

// DeepSeek-V4's golden (every layer kind, hash layers, 4 streams): F32 logits and each layer's streams
// against transformers 5.25 within 1e-5 of the range; and it holds one tied selection: on prompt 1's
// greedy step 3 layer 3's indexer scores its 4 entries 0, 0.138, -0.162, 0 and keeps 2, so the second
// pick is a tie at 0 (docs/ops.md, "Ties") that transformers' topk breaks the other way. align compares
// up to it, says so, and passes on what it compared; the same comparison without the engine's tie flags
// diverges right there, which is what the flags are for.
TEST(DeepseekV4Golden, ATiedSelectionEndsTheComparisonAndIsReported) {
  const V4Dumps d = v4_f32_dumps();
  ASSERT_FALSE(d.engine.prompts.empty());
  const AlignThresholds th = default_thresholds(ActivationPrecision::kF32);
  const AlignReport r = compare_dumps(d.reference, d.engine, th);
  EXPECT_TRUE(r.pass()) << align_report_text(r);
  EXPECT_LE(r.logits.max_abs_err, 1e-5 * r.logits.logit_range) << align_report_text(r);
  EXPECT_DOUBLE_EQ(r.logits.same_top1, 1.0);
  EXPECT_EQ(r.layers.rows.size(), 5u) << align_report_text(r);  // 4 layers' streams, the final norm
  ASSERT_EQ(r.tie_cuts.size(), 1u) << align_report_text(r);
  const SelectionTieCut& cut = r.tie_cuts.front();
  EXPECT_EQ(cut.prompt, 1);
  EXPECT_EQ(cut.rows, cut.of_rows);  // the prompt's own rows are all compared
  EXPECT_EQ(cut.steps, 3);
  EXPECT_GT(cut.of_steps, 3);
  for (const GreedyCheck& g : r.greedy) EXPECT_EQ(g.first_divergence, -1) << align_report_text(r);
  EXPECT_NE(align_report_text(r).find("greedy step 3 ties: compared 3 of"), std::string::npos);
  EXPECT_EQ(align_report_json(r)["selection_tie_cuts"][0]["greedy_steps_compared"], 3);

  ReferenceDump unflagged = d.engine;
  for (ReferencePrompt& p : unflagged.prompts) {
    p.selection_ties.clear();
    p.greedy_selection_ties.clear();
  }
  const AlignReport blind = compare_dumps(d.reference, unflagged, th);
  EXPECT_TRUE(blind.tie_cuts.empty());
  ASSERT_GT(blind.greedy.size(), 1u);
  EXPECT_EQ(blind.greedy[1].first_divergence, 3) << align_report_text(blind);
}

// A dump's tie flags survive the file (day0 run --dump, then day0 align on it) and bad ones are refused.
TEST(DeepseekV4Golden, TieFlagsRoundTripThroughTheDumpFile) {
  const V4Dumps d = v4_f32_dumps();
  ASSERT_FALSE(d.engine.prompts.empty());
  const std::string path = ::testing::TempDir() + "/v4_ties.safetensors";
  ASSERT_TRUE(write_reference_dump(d.engine, path).is_ok());
  auto back = read_reference_dump(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->prompts.size(), d.engine.prompts.size());
  for (size_t i = 0; i < d.engine.prompts.size(); ++i) {
    EXPECT_EQ(back->prompts[i].selection_ties, d.engine.prompts[i].selection_ties);
    EXPECT_EQ(back->prompts[i].greedy_selection_ties, d.engine.prompts[i].greedy_selection_ties);
  }
  EXPECT_EQ(d.engine.prompts[1].greedy_selection_ties.at(3), 1);
  ReferenceDump bad = d.engine;
  bad.prompts[0].selection_ties.push_back(0);  // one flag too many
  EXPECT_FALSE(validate_reference_dump(bad).is_ok());
  bad = d.engine;
  bad.prompts[0].selection_ties[0] = 2;
  EXPECT_FALSE(validate_reference_dump(bad).is_ok());
}

// FP8 scale blocks of the grouped output projection must not straddle two groups (the kernel reads a
// group's rows by whole blocks): a layout where they would is refused when the engine is made, naming
// the tensor, never a failed kernel check in the first forward.
TEST(DeepseekV4Golden, OutputGroupsStraddlingFp8BlocksAreRefused) {
  auto run = open_golden("deepseek-v4-fp4");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  auto weights = std::make_shared<ModelWeights>(*run->model.weights);
  WeightView& o_a = weights->layers.front().attn.o_a.w;
  ASSERT_EQ(o_a.format, WeightFormat::kFp8Block);
  const int64_t rank = run->model.spec.shared_kv_low_rank->out_rank;
  ASSERT_EQ(rank % o_a.block_rows, 0);
  o_a.block_rows = 2 * rank;  // as if a block held two groups' rows
  auto engine = Engine::create(run->model.spec, weights, *run->backend);
  ASSERT_FALSE(engine.is_ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(engine.status().message().find(o_a.name), std::string::npos) << engine.status().to_string();
}

}  // namespace
}  // namespace day0::testing
