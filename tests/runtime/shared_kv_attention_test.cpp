// The shared key = value attention block (blocks::shared_kv_attention) against transformers 5.25's
// DeepseekV4Attention on its three layer kinds (tests/data/ops/shared_kv_attention.json, written by
// tools/reference/make_op_fixtures.py): a prefill of 10 tokens then two one-token decode steps, each side
// through its own cache, float32, on the reference backend and the cpu backend at every SIMD level. Then
// the block against itself: the same tokens fed in other step sizes give the same outputs, and a cache
// cut back to a snapshot or a checkpoint (entries in pool blocks, partial groups in the state block)
// continues exactly as the uncut sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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
  KvBlockPool& pool() { return *pool_; }
  void set_cache(KvCache cache) { *cache_ = std::move(cache); }

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
    layout.snapshot_at = {cache_->plan_snapshot(n)};  // as the engine does
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
    EXPECT_EQ(run.cache().entries(1, CompressedEntries::kCompressor), 6);
    EXPECT_EQ(run.cache().entries(1, CompressedEntries::kIndexer), 6);
    EXPECT_EQ(run.cache().entries(2, CompressedEntries::kCompressor), 3);
    EXPECT_EQ(run.cache().entries(2, CompressedEntries::kIndexer), 0);
    EXPECT_FALSE(run.cache().compressed_layer(0));
    EXPECT_EQ(run.cache().compressed(0).tokens, nullptr);
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The rows [from, to) of a layer's outputs [rows, hidden].
std::vector<float> rows_of(const std::vector<float>& out, int64_t hidden, int64_t from, int64_t to) {
  return {out.begin() + from * hidden, out.begin() + to * hidden};
}

// Blocks of 4 tokens. A step of 7 saves a snapshot at 4 (mid-step): the cache goes back to 4, 0 and 7, no
// other length. A fork cut back to 4 (a prefix-cache entry: 2 entries of ratio 2, 1 of ratio 4, the
// partial groups restored from the snapshot) fed the rest gives the uncut run's outputs bit for bit, and so
// does a checkpoint at 7 after draft rows are rolled back. The entries' blocks are shared by the fork and
// every block goes back to the pool with its holders.
TEST(SharedKvAttention, CacheGoesBackToSnapshotsAndCheckpointsExactly) {
  Fixture fx;
  const int64_t hidden = fx.spec.hidden_size, total = static_cast<int64_t>(fx.x.size()) / hidden;
  ASSERT_EQ(total, 12);
  Backends backends;
  for (auto& [label, be] : backends.all) {
    SCOPED_TRACE(label);
    std::vector<std::vector<float>> plain;  // 7 rows, then 5
    BlockRun one(*be, fx.spec, fx.layers);
    one.step(fx.x, 7, plain);
    one.step(fx.x, 5, plain);

    BlockRun run(*be, fx.spec, fx.layers);
    std::vector<std::vector<float>> first;
    run.step(fx.x, 7, first);
    KvCache& cache = run.cache();
    EXPECT_EQ(cache.snapshot_tokens(), 4);
    EXPECT_TRUE(cache.can_truncate(4));
    EXPECT_TRUE(cache.can_truncate(7));
    EXPECT_TRUE(cache.can_truncate(0));
    EXPECT_FALSE(cache.can_truncate(5));  // no snapshot of the partial groups there
    EXPECT_FALSE(cache.can_truncate(3));
    const int64_t blocks_before = run.pool().blocks_allocated();

    // A prefix entry: fork, cut back to 4, then the rows 4..11 in one step.
    {
      KvCache entry = cache.fork();
      EXPECT_EQ(run.pool().blocks_allocated(), blocks_before) << "a fork shares every block";
      ASSERT_TRUE(entry.truncate(4).is_ok());
      EXPECT_EQ(entry.entries(1, CompressedEntries::kCompressor), 2);
      EXPECT_EQ(entry.entries(1, CompressedEntries::kIndexer), 2);
      EXPECT_EQ(entry.entries(2, CompressedEntries::kCompressor), 1);
      EXPECT_EQ(*entry.compressed(2).tokens, 4);
      EXPECT_FALSE(entry.truncate(3).is_ok());  // no snapshot at 3: the state is lost
      EXPECT_TRUE(entry.state_lost());
    }
    BlockRun cut(*be, fx.spec, fx.layers);
    std::vector<std::vector<float>> again;
    {
      KvCache entry = cache.fork();
      ASSERT_TRUE(entry.truncate(4).is_ok());
      cut.set_cache(std::move(entry));
    }
    cut.step(fx.x, 8, again);  // positions 4..11 (step() reads the rows at the cache's length)
    for (size_t l = 0; l < fx.layers.size(); ++l) {
      SCOPED_TRACE(fmt::format("layer {}", l));
      std::vector<float> want = rows_of(plain[l], hidden, 4, total);
      EXPECT_TRUE(same_bits(again[l], want))
          << error_of_range(again[l], want, hidden, std::vector<bool>(8, true));
    }

    // Speculative decoding: a checkpoint at 7, three draft rows (other hidden states), back to 7, the
    // accepted rows.
    cache.checkpoint();
    std::vector<float> drafts(fx.x.size());
    for (size_t i = 0; i < drafts.size(); ++i) drafts[i] = 0.5f * fx.x[drafts.size() - 1 - i];
    std::vector<std::vector<float>> ignored, accepted;
    run.step(drafts, 3, ignored);  // 7 -> 10: passes the boundary at 8
    EXPECT_EQ(cache.snapshot_tokens(), 8);
    EXPECT_FALSE(cache.can_truncate(9));
    ASSERT_TRUE(cache.truncate(7).is_ok());
    EXPECT_EQ(cache.entries(1, CompressedEntries::kCompressor), 3);
    EXPECT_EQ(cache.entries(2, CompressedEntries::kCompressor), 1);
    run.step(fx.x, 5, accepted);
    for (size_t l = 0; l < fx.layers.size(); ++l) {
      SCOPED_TRACE(fmt::format("layer {} after the rollback", l));
      EXPECT_TRUE(same_bits(accepted[l], rows_of(plain[l], hidden, 7, total)));
    }
    cache.drop_checkpoint();
  }
}

// The books: every compressed entry sits in a pool block; a fork shares them and its first entry into a
// shared block copies that block; the pool takes them all back.
TEST(SharedKvAttention, CompressedEntriesArePoolBlocksSharedAndCopiedOnWrite) {
  Fixture fx;
  auto be = make_backend("reference").value();
  BlockRun run(*be, fx.spec, fx.layers);
  std::vector<std::vector<float>> out;
  run.step(fx.x, 6, out);
  KvCache& cache = run.cache();
  // Raw rows: 3 layers x 2 blocks of 4 rows. A block holds 4 rows of 16 floats: 4 entries of 16 or 8
  // indexer keys of 8. The sparse layer's 3 entries and 3 indexer keys (ratio 2) take a block each, the
  // heavy layer's 1 entry (ratio 4) one.
  std::vector<int32_t> held;
  cache.collect_blocks(held);
  EXPECT_EQ(cache.blocks_held(), static_cast<int64_t>(held.size()));
  EXPECT_EQ(cache.blocks_held(), 3 * 2 + 3);
  EXPECT_EQ(run.pool().blocks_allocated(), cache.blocks_held());
  EXPECT_EQ(cache.bytes(), static_cast<uint64_t>(cache.blocks_held()) * run.pool().block_bytes());
  const KvPages sparse = cache.entry_pages(1, CompressedEntries::kCompressor);
  EXPECT_EQ(sparse.length, 3);
  const int64_t allocated = run.pool().blocks_allocated();
  {
    KvCache fork = cache.fork();
    EXPECT_EQ(run.pool().blocks_allocated(), allocated);
    EXPECT_NE(fork.append_entry(1, CompressedEntries::kCompressor), nullptr);
    EXPECT_EQ(run.pool().blocks_allocated(), allocated + 1) << "the shared entry block was copied";
    EXPECT_EQ(fork.entries(1, CompressedEntries::kCompressor), 4);
    EXPECT_EQ(cache.entries(1, CompressedEntries::kCompressor), 3);
    const KvPages copy = fork.entry_pages(1, CompressedEntries::kCompressor);
    EXPECT_NE(copy.table[0], sparse.table[0]);
    // The copy holds the same entries.
    const int64_t bytes = fx.spec.head_dim * kv_dtype_bytes(sparse.dtype);
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(std::memcmp(copy.second_row(j), sparse.second_row(j), bytes), 0);
  }
  EXPECT_EQ(run.pool().blocks_allocated(), allocated);
  ASSERT_TRUE(cache.truncate(0).is_ok());
  EXPECT_EQ(cache.entries(1, CompressedEntries::kCompressor), 0);
  EXPECT_EQ(*cache.compressed(1).tokens, 0);
  EXPECT_EQ(run.pool().blocks_allocated(), 0);
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
