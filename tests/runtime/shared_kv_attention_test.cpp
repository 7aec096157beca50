// The shared key = value attention block (blocks::shared_kv_attention) against transformers 5.25's
// DeepseekV4Attention on its three layer kinds (tests/data/ops/shared_kv_attention.json, written by
// tools/reference/make_op_fixtures.py): a prefill of 10 tokens then two one-token decode steps, each side
// through its own cache, float32, on the reference backend and the cpu backend at every SIMD level. Then
// the block against itself: the same tokens fed in other step sizes give the same outputs, and the cache
// refuses to cut a compressed layer's state back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/backends/cpu/simd_level.h"
#include "day0/model/config_parser.h"
#include "day0/model/model_memory.h"
#include "day0/runtime/blocks.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {
namespace {

nlohmann::json fixture() {
  std::ifstream in(std::string(DAY0_TEST_DATA_DIR) + "/data/ops/shared_kv_attention.json");
  EXPECT_TRUE(in.good()) << "tests/data/ops/shared_kv_attention.json";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

std::vector<float> floats(const nlohmann::json& v) {
  return v.get<std::vector<float>>();
}

// A layer's weights in the block's fields, viewing float32 vectors kept in `store`.
struct LayerParams {
  std::map<std::string, std::vector<float>> store;
  AttentionWeights w;
};

void bind_params(LayerParams& p, const nlohmann::json& params) {
  for (const auto& [name, values] : params.items()) p.store[name] = floats(values);
  const auto vec = [&](const char* name) -> std::span<const float> {
    auto it = p.store.find(name);
    return it == p.store.end() ? std::span<const float>{} : std::span<const float>(it->second);
  };
  const auto lin = [&](const char* name, int64_t cols) {
    Linear l;
    auto it = p.store.find(name);
    if (it == p.store.end()) return l;
    l.w = WeightView{.format = WeightFormat::kF32,
                     .rows = static_cast<int64_t>(it->second.size()) / cols,
                     .cols = cols,
                     .data = it->second.data()};
    return l;
  };
  p.w.sinks = vec("sinks");
  p.w.q_a_norm = vec("q_a_norm.weight");
  p.w.kv_norm = vec("kv_norm.weight");
  p.w.compressor.position_bias = vec("compressor.position_bias");
  p.w.compressor.norm = vec("compressor.kv_norm.weight");
  p.w.index_compressor.position_bias = vec("compressor.indexer.position_bias");
  p.w.index_compressor.norm = vec("compressor.indexer.kv_norm.weight");
  const int64_t hidden = 16, q_rank = 8, attn_width = 4 * 16, o_groups = 2;
  p.w.q_a = lin("q_a_proj.weight", hidden);
  p.w.q_b = lin("q_b_proj.weight", q_rank);
  p.w.kv = lin("kv_proj.weight", hidden);
  p.w.o_a = lin("o_a_proj.weight", attn_width / o_groups);
  p.w.o_b = lin("o_b_proj.weight", 2 * 6);
  p.w.compressor.kv = lin("compressor.kv_proj.weight", hidden);
  p.w.compressor.gate = lin("compressor.gate_proj.weight", hidden);
  p.w.index_compressor.kv = lin("compressor.indexer.kv_proj.weight", hidden);
  p.w.index_compressor.gate = lin("compressor.indexer.gate_proj.weight", hidden);
  p.w.index_q = lin("compressor.indexer.q_b_proj.weight", q_rank);
  p.w.index_weights = lin("compressor.indexer.scorer.weights_proj.weight", hidden);
}

struct Backends {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> all;
  Backends() {
    all.emplace_back("reference", std::move(make_backend("reference").value()));
    for (SimdLevel level : available_simd_levels()) {
      BackendOptions o;
      o.simd = level;
      o.n_threads = 2;
      all.emplace_back(fmt::format("cpu/{}", simd_level_name(level)),
                       std::move(make_backend("cpu", o).value()));
    }
  }
};

// The block over a sequence fed in steps of `calls` tokens: per step and layer its output rows [n, H].
class BlockRun {
 public:
  BlockRun(Backend& be, const ModelSpec& spec, std::vector<LayerParams>& layers)
      : be_(be), spec_(spec), layers_(layers) {
    const KvRowWidths widths = kv_row_widths(spec);
    pool_ = std::make_shared<KvBlockPool>(
        widths.first, widths.second,
        KvCacheOptions{.dtype = KvDtype::kF32, .block_tokens = 4, .window_dtype = KvDtype::kF32});
    cache_ = std::make_unique<KvCache>(pool_, spec);
    rope_ = rope_frequencies(spec.rope_theta, rotary_dims(spec.head_dim, spec.partial_rotary_factor),
                             spec.rope, spec.max_position_embeddings, spec.max_position_embeddings)
                .value();
  }

  KvCache& cache() { return *cache_; }

  // outputs[layer] gets the step's rows appended.
  void step(const std::vector<float>& x, int64_t n, std::vector<std::vector<float>>& outputs) {
    const int64_t hidden = spec_.hidden_size, p0 = cache_->length();
    blocks::StepLayout layout;
    layout.caches = {cache_.get()};
    layout.row0 = {0};
    layout.rows = {n};
    layout.pos0 = {p0};
    for (int64_t i = 0; i < n; ++i) layout.positions.push_back(p0 + i);
    layout.total_rows = n;
    const blocks::Context c{
        .be = be_, .spec = spec_, .options = options_, .layout = layout, .rope = rope_, .arena = arena_};
    arena_.begin_step();
    const ConstMatrix h(x.data() + p0 * hidden, n, hidden);
    outputs.resize(layers_.size());
    for (size_t l = 0; l < layers_.size(); ++l) {
      blocks::Buffer out(arena_, n, hidden);
      blocks::shared_kv_attention(c, static_cast<int64_t>(l), layers_[l].w, h, out.m);
      be_.synchronize();
      outputs[l].insert(outputs[l].end(), out.data(), out.data() + n * hidden);
    }
    cache_->commit(n);
  }

 private:
  Backend& be_;
  const ModelSpec& spec_;
  std::vector<LayerParams>& layers_;
  EngineOptions options_;
  std::shared_ptr<KvBlockPool> pool_;
  std::unique_ptr<KvCache> cache_;
  RopeFrequencies rope_;
  blocks::StepArena arena_;
};

// Largest |got - want| over the largest |want| of rows `keep` of [rows, cols] matrices.
double error_of_range(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                      const std::vector<bool>& keep) {
  double err = 0.0, range = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!keep[i / static_cast<size_t>(cols)]) continue;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    range = std::max(range, std::fabs(static_cast<double>(want[i])));
  }
  return got.size() == want.size() && range > 0.0 ? err / range : INFINITY;  // nothing compared fails
}

struct Fixture {
  nlohmann::json f = fixture();
  ModelSpec spec;
  std::vector<LayerParams> layers;
  std::vector<float> x;
  std::vector<int64_t> calls;
  Fixture() {
    auto parsed = parse_model_config(f.at("config"), "shared_kv_attention.json");
    EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    spec = parsed.value();
    layers.resize(f.at("layers").size());
    for (size_t l = 0; l < layers.size(); ++l) bind_params(layers[l], f.at("layers")[l].at("params"));
    x = floats(f.at("x"));
    calls = f.at("calls").get<std::vector<int64_t>>();
  }
};

TEST(SharedKvAttention, MatchesTransformersPrefillThenDecode) {
  Fixture fx;
  ASSERT_EQ(fx.spec.n_layers, 3);
  ASSERT_EQ(fx.spec.layers[1].kv_compress_ratio, 2);
  ASSERT_TRUE(fx.spec.layers[1].compressed_sparse);
  ASSERT_EQ(fx.spec.layers[2].kv_compress_ratio, 4);
  const int64_t hidden = fx.spec.hidden_size, m = fx.spec.layers[1].kv_compress_ratio;
  const int64_t k = fx.spec.compressed_kv->index_topk;
  // The sparse layer's rows whose top-k is a tie in transformers' own scores (the k-th and the (k+1)-th
  // best visible entries equal): torch picks among them in no defined order, so those rows' outputs are
  // not compared (the row of position 5, whose hidden state is zero, scores every entry 0; the only one).
  std::vector<std::vector<bool>> decided;  // [call][row]
  const nlohmann::json& sparse = fx.f.at("layers")[1];
  int64_t start = 0, ties = 0;
  for (size_t call = 0; call < fx.calls.size(); ++call) {
    const int64_t n = fx.calls[call], entries = sparse.at("index_entries")[call];
    const std::vector<float> scores = floats(sparse.at("index_scores")[call]);
    std::vector<bool> keep(static_cast<size_t>(n), true);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t visible = std::min(entries, (start + r + 1) / m);
      if (visible <= k) continue;
      std::vector<float> row(scores.begin() + r * entries, scores.begin() + r * entries + visible);
      std::sort(row.begin(), row.end(), std::greater<>());
      if (row[static_cast<size_t>(k - 1)] == row[static_cast<size_t>(k)]) {
        keep[static_cast<size_t>(r)] = false;
        ++ties;
      }
    }
    decided.push_back(keep);
    start += n;
  }
  EXPECT_EQ(ties, 1) << "the zero hidden state at position 5 ties, no other row";
  EXPECT_FALSE(decided[0][5]);
  Backends backends;
  for (auto& [label, be] : backends.all) {
    SCOPED_TRACE(label);
    BlockRun run(*be, fx.spec, fx.layers);
    for (size_t call = 0; call < fx.calls.size(); ++call) {
      std::vector<std::vector<float>> got;
      run.step(fx.x, fx.calls[call], got);
      for (size_t l = 0; l < fx.layers.size(); ++l) {
        SCOPED_TRACE(fmt::format("layer {} ({}), call {}", l,
                                 fx.f.at("layers")[l].at("kind").get<std::string>(), call));
        const std::vector<float> want = floats(fx.f.at("layers")[l].at("outputs")[call]);
        const std::vector<bool> all(static_cast<size_t>(fx.calls[call]), true);
        EXPECT_LT(error_of_range(got[l], want, hidden, l == 1 ? decided[call] : all), 1e-5);
      }
    }
    // Compressed entries: 12 tokens make 6 of ratio 2 (the sparse layer) and 3 of ratio 4.
    EXPECT_EQ(run.cache().compressed(1)->compressor.n_entries, 6);
    EXPECT_EQ(run.cache().compressed(1)->indexer.n_entries, 6);
    EXPECT_EQ(run.cache().compressed(2)->compressor.n_entries, 3);
    EXPECT_EQ(run.cache().compressed(0), nullptr);
  }
}

// Prefill of T tokens then decode steps equal one forward over the same tokens, whatever the steps cut
// through windows (the compressor's partial window and overlap carried across steps).
TEST(SharedKvAttention, StepsOfAnySizeEqualOneForward) {
  Fixture fx;
  const auto total = static_cast<int64_t>(fx.x.size()) / fx.spec.hidden_size;
  Backends backends;
  for (auto& [label, be] : backends.all) {
    SCOPED_TRACE(label);
    std::vector<std::vector<float>> whole, cut;
    BlockRun one(*be, fx.spec, fx.layers);
    one.step(fx.x, total, whole);
    BlockRun steps(*be, fx.spec, fx.layers);
    for (int64_t n : {3, 1, 4, 1, 3}) steps.step(fx.x, n, cut);
    for (size_t l = 0; l < whole.size(); ++l) {
      SCOPED_TRACE(fmt::format("layer {}", l));
      EXPECT_LT(error_of_range(cut[l], whole[l], fx.spec.hidden_size,
                               std::vector<bool>(static_cast<size_t>(total), true)),
                1e-6);
    }
  }
}

TEST(SharedKvAttention, CacheRefusesToCutCompressedStateBack) {
  Fixture fx;
  auto be = make_backend("reference").value();
  BlockRun run(*be, fx.spec, fx.layers);
  std::vector<std::vector<float>> out;
  run.step(fx.x, 7, out);
  EXPECT_FALSE(run.cache().can_truncate(4));
  const Status cut = run.cache().truncate(4);
  EXPECT_FALSE(cut.is_ok());
  EXPECT_NE(cut.to_string().find("compressed KV attention"), std::string::npos) << cut.to_string();
  KvCache fork = run.cache().fork();  // a fork carries the state whole
  EXPECT_EQ(fork.compressed(2)->compressor.n_entries, 1);
  EXPECT_EQ(fork.compressed(2)->compressor.tail_kv.size(),
            run.cache().compressed(2)->compressor.tail_kv.size());
  ASSERT_TRUE(run.cache().truncate(0).is_ok());
  EXPECT_EQ(run.cache().compressed(1)->compressor.n_entries, 0);
  EXPECT_EQ(run.cache().compressed(1)->tokens, 0);
}

// The golden checkpoint (transformers 5.25's save names) binds every tensor the block reads, at its shape.
TEST(SharedKvAttention, GoldenCheckpointBindsTheBlocksWeights) {
  const std::string dir = std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4";
  auto spec = load_model_config(dir + "/config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto source = open_checkpoint_source(dir);
  ASSERT_TRUE(source.is_ok()) << source.status().to_string();
  auto weights = bind_model_weights(*spec, std::shared_ptr<const TensorSource>(std::move(*source)));
  ASSERT_TRUE(weights.is_ok()) << weights.status().to_string();
  const ModelSpec& s = *spec;
  const SharedKvLowRankAttentionSpec& a = *s.shared_kv_low_rank;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    SCOPED_TRACE(fmt::format("layer {}", l));
    const LayerSpec& ls = s.layers[static_cast<size_t>(l)];
    const AttentionWeights& w = (*weights)->layers[static_cast<size_t>(l)].attn;
    EXPECT_EQ(w.q_a.w.rows, a.q_lora_rank);
    EXPECT_EQ(w.q_b.w.rows, s.n_heads * s.head_dim);
    EXPECT_EQ(w.kv.w.rows, s.head_dim);
    EXPECT_EQ(w.o_a.w.rows, a.out_groups * a.out_rank);
    EXPECT_EQ(w.o_b.w.cols, a.out_groups * a.out_rank);
    EXPECT_EQ(w.q_a_norm.size(), static_cast<size_t>(a.q_lora_rank));
    EXPECT_EQ(w.kv_norm.size(), static_cast<size_t>(s.head_dim));
    EXPECT_EQ(w.sinks.size(), static_cast<size_t>(s.n_heads));
    const int64_t m = ls.kv_compress_ratio, width = ls.compressed_sparse ? 2 * s.head_dim : s.head_dim;
    EXPECT_EQ(w.compressor.present(), m > 0);
    if (m > 0) {
      EXPECT_EQ(w.compressor.kv.w.rows, width);
      EXPECT_EQ(w.compressor.position_bias.size(), static_cast<size_t>(m * width));
      EXPECT_EQ(w.compressor.norm.size(), static_cast<size_t>(s.head_dim));
    }
    EXPECT_EQ(w.index_compressor.present(), ls.compressed_sparse);
    if (ls.compressed_sparse) {
      const int64_t di = s.compressed_kv->index_head_dim;
      EXPECT_EQ(w.index_compressor.position_bias.size(), static_cast<size_t>(m * 2 * di));
      EXPECT_EQ(w.index_q.w.rows, s.compressed_kv->index_n_heads * di);
      EXPECT_EQ(w.index_weights.w.rows, s.compressed_kv->index_n_heads);
    }
  }
  // An engine over weights that lack a compressed layer's compressor refuses them by layer.
  auto missing = std::make_shared<ModelWeights>(**weights);
  missing->layers[2].attn.compressor.kv = Linear{};
  auto be = make_backend("reference").value();
  auto engine = Engine::create(s, missing, *be, EngineOptions{});
  ASSERT_FALSE(engine.is_ok());
  EXPECT_NE(engine.status().message().find("attention layer 2 without its projections, compressor"),
            std::string::npos)
      << engine.status().to_string();
}

}  // namespace
}  // namespace day0
