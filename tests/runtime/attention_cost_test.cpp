// The planner's attention costs (model/attention_cost.h) are what the engine's kernels cost and read:
//  - per (query, key) pair: on a miniature of every catalog entry (the release's head widths and MLA ranks
//    kept), the recording backend's attention and indexer FLOPs of the prefill step and of the decode step
//    grow, from 1 key a query to 2, by exactly the step's query rows times the layers' per-pair figures;
//  - the keys a row reads: DeepSeek-V4's golden checkpoint run for real, past its window, gathers for
//    every row exactly the keys row_keys() counts, and the recorder and the planner cost those keys at
//    any context;
//  - the planner's attention and indexer FLOPs per decoded token equal the recorder's on the catalog's
//    sparse and compressed releases;
//  - compressed attention's pooling, which a decode step runs once per `ratio` tokens, is listed at its
//    share per decoded token.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <numeric>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/recording_backend.h"
#include "day0/model/attention_cost.h"
#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "day0/ops/op_names.h"
#include "day0/plan/estimate.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/op_recording.h"
#include "day0/synth/miniature.h"

namespace day0 {
namespace {

bool is_attention(const std::string& op) {
  return op == op::kAttention || op == op::kPagedAttention || op == op::kMlaAttention ||
         op == op::kPagedMlaAttention;
}

bool is_indexer(const std::string& op) {
  return op == op::kIndexerTopk || op == op::kBlockIndexerTopk;
}

// The attention kernels' FLOPs of one step, less their weight matmuls (MLA's absorption per query and
// expansion per key): what scales with the (query, key) pairs.
double attention_pair_flops(const std::vector<RecordedCall>& calls, StepPhase phase) {
  double flops = 0;
  for (const RecordedCall& c : calls) {
    if (c.phase == phase && is_attention(c.op.name))
      flops += c.op.flops_per_token - c.op.matmul_flops_per_token;
  }
  return flops;
}

double indexer_flops(const std::vector<RecordedCall>& calls, StepPhase phase) {
  double flops = 0;
  for (const RecordedCall& c : calls) {
    if (c.phase == phase && is_indexer(c.op.name)) flops += c.op.flops_per_token;
  }
  return flops;
}

TEST(AttentionCost, PerPairFlopsAreWhatTheRecorderMeasuresOnEveryCatalogEntry) {
  int checked = 0, indexed = 0;
  for (const CatalogEntry& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    auto full = catalog_model(entry.name);
    ASSERT_TRUE(full.is_ok()) << full.status().to_string();
    if (!unimplemented_mechanisms(*full).empty()) continue;  // not run yet: nothing to record
    MiniatureOptions shrink;
    shrink.release_attention = true;
    auto mini = make_miniature_spec(*full, shrink);
    ASSERT_TRUE(mini.is_ok()) << mini.status().to_string();
    // Every query costed with 1 cached key, then 2 (windows and sparse selections hold at least 2).
    auto one_key = record_calls(*mini, 0);
    auto two_keys = record_calls(*mini, 1);
    ASSERT_TRUE(one_key.is_ok()) << one_key.status().to_string();
    ASSERT_TRUE(two_keys.is_ok()) << two_keys.status().to_string();
    // Each layer's figures times the keys a row gains from 1 visible position to 2 (an indexer over
    // compressed entries gains none: no window of them is complete yet).
    double decode = 0, prefill = 0, index = 0;
    for (const LayerSpec& layer : mini->layers) {
      const AttentionPairCost pair = attention_pair_cost(*mini, layer);
      const RowKeys one = row_keys(pair.reach, 1), two = row_keys(pair.reach, 2);
      decode += pair.decode_flops * (two.attended - one.attended);
      prefill += pair.prefill_flops * (two.attended - one.attended);
      index += pair.index_flops * (two.indexed - one.indexed);
    }
    const double measured_decode = attention_pair_flops(*two_keys, StepPhase::kDecode) -
                                   attention_pair_flops(*one_key, StepPhase::kDecode);
    const double measured_prefill = attention_pair_flops(*two_keys, StepPhase::kPrefill) -
                                    attention_pair_flops(*one_key, StepPhase::kPrefill);
    const auto rows = static_cast<double>(recorded_prompt_tokens(*mini));
    EXPECT_DOUBLE_EQ(measured_decode, decode);  // one query row
    EXPECT_DOUBLE_EQ(measured_prefill, rows * prefill);
    EXPECT_DOUBLE_EQ(
        indexer_flops(*two_keys, StepPhase::kDecode) - indexer_flops(*one_key, StepPhase::kDecode), index);
    EXPECT_DOUBLE_EQ(
        indexer_flops(*two_keys, StepPhase::kPrefill) - indexer_flops(*one_key, StepPhase::kPrefill),
        rows * index);
    checked += decode > 0 ? 1 : 0;  // a miniature's few layers may all be recurrent
    indexed += index > 0 ? 1 : 0;
  }
  EXPECT_GT(checked, 40);
  EXPECT_GE(indexed, 3);  // DeepSeek-V3.2 and GLM-5's lightning indexer, MiniMax-M3's block indexer
}

std::string golden_v4_dir() {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4";
}

// The planner's attention FLOPs of the model: decode at `context` visible positions, and a prompt of
// `context` tokens.
plan::LayerSums planner_attention(const ModelSpec& spec, int64_t context) {
  auto manifest = build_tensor_manifest(spec);
  EXPECT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  auto cost = plan::model_cost_from_spec(spec, *manifest, "deepseek-v4 golden");
  EXPECT_TRUE(cost.is_ok()) << cost.status().to_string();
  plan::Workload w;
  w.context = context;
  const plan::PreparedModel prepared = plan::prepare_model(*cost, w, plan::DeviceSpec{});
  return prepared.prefix.back();
}

// The golden config's layers: sliding only, compressed sparse (1 entry / 4 tokens, top 2), heavily
// compressed (compress_rate_hca: 1 entry / 8 tokens), compressed sparse; every one with a window of 8.
TEST(AttentionCost, DeepSeekV4RowsReadTheirWindowAndEntries) {
  auto spec = load_model_config(golden_v4_dir() + "/config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_EQ(spec->n_layers, 4);
  const std::vector<int64_t> ratios = {0, 4, 8, 4};
  for (size_t i = 0; i < ratios.size(); ++i) {
    EXPECT_EQ(spec->layers[i].kv_compress_ratio, ratios[i]);
    EXPECT_EQ(spec->layers[i].window, 8);
  }
  ASSERT_EQ(spec->compressed_kv->index_topk, 2);
  // A row that sees 41 positions (40 cached): the window's 8 raw keys; the heavy layer adds its
  // floor(41 / 8) = 5 entries; the sparse ones their top 2 of floor(41 / 4) = 10, all 10 scored.
  const std::vector<RowKeys> decode = {{8, 0}, {10, 10}, {13, 0}, {10, 10}};
  // A prompt of 41 tokens: raw keys 1 + 2 + ... + 8, then 8 for 33 rows = 300; entries floor(v / m)
  // over v = 1 .. 41: m = 8: 8 x (1 + 2 + 3 + 4) + 2 x 5 = 90; m = 4, at most 2: 4 x 1 + 34 x 2 = 72,
  // scored 4 x (1 + ... + 9) + 2 x 10 = 200.
  const std::vector<RowKeys> prompt = {{300, 0}, {372, 200}, {390, 0}, {372, 200}};
  for (size_t i = 0; i < ratios.size(); ++i) {
    SCOPED_TRACE(fmt::format("layer {}", i));
    const KeyReach reach = key_reach(*spec, spec->layers[i]);
    EXPECT_EQ(row_keys(reach, 41).attended, decode[i].attended);
    EXPECT_EQ(row_keys(reach, 41).indexed, decode[i].indexed);
    EXPECT_EQ(prompt_keys(reach, 41).attended, prompt[i].attended);
    EXPECT_EQ(prompt_keys(reach, 41).indexed, prompt[i].indexed);
  }
}

// The closed form of a prompt's keys is the sum of its rows', for every kind of reach.
TEST(AttentionCost, PromptKeysSumTheRows) {
  const std::vector<KeyReach> reaches = {{},
                                         {.window = 7},
                                         {.selected = 5, .indexed = true},
                                         {.window = 7, .selected = 3},
                                         {.window = 6, .entry_ratio = 4},
                                         {.window = 6, .entry_ratio = 4, .selected = 3, .indexed = true},
                                         {.entry_ratio = 1, .selected = 2, .indexed = true}};
  for (const KeyReach& reach : reaches) {
    RowKeys sum;
    for (int64_t v = 1; v <= 60; ++v) {
      SCOPED_TRACE(fmt::format("window {} ratio {} selected {}: {} tokens", reach.window, reach.entry_ratio,
                               reach.selected, v));
      sum.attended += row_keys(reach, v).attended;
      sum.indexed += row_keys(reach, v).indexed;
      EXPECT_EQ(prompt_keys(reach, v).attended, sum.attended);
      EXPECT_EQ(prompt_keys(reach, v).indexed, sum.indexed);
    }
  }
}

// DeepSeek-V4's golden checkpoint run for real on the cpu backend, a prompt of 21 tokens (past the
// window of 8, past the sparse layers' top 2) and three decode steps, each call costed at the keys it
// held: every row gathered the keys row_keys() counts, and the planner costs the same prompt and the
// same decode step.
TEST(AttentionCost, DeepSeekV4GathersTheKeysRowKeysCounts) {
  auto model = load_model(golden_v4_dir());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const ModelSpec& spec = model->spec;
  BackendOptions options;
  options.n_threads = 1;
  auto cpu = open_backend("cpu", options);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  RecordingBackend recorder(cpu->get(), -1);
  auto engine = Engine::create(spec, model->weights, recorder);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  constexpr int64_t kPrompt = 21, kNew = 4;
  std::vector<int32_t> prompt(kPrompt);
  for (int64_t i = 0; i < kPrompt; ++i)
    prompt[static_cast<size_t>(i)] = static_cast<int32_t>((7 * i + 3) % 256);
  recorder.set_phase(StepPhase::kPrefill);
  auto run = generate(**engine, prompt, kNew, SamplingParams{}, 0, [&](const GenerationStep&) {
    recorder.set_phase(StepPhase::kDecode);
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();

  std::vector<AttentionPairCost> pairs;
  for (const LayerSpec& l : spec.layers) pairs.push_back(attention_pair_cost(spec, l));
  // One attention call per row and layer (one query row over the keys gathered for it), layer by layer
  // in the prefill step; the keys it held are its FLOPs over the pair's.
  std::vector<double> prefill_keys, decode_keys, decode_indexed;
  double prefill_flops = 0, first_decode_flops = 0;
  for (const RecordedCall& c : recorder.calls()) {
    const bool prefill = c.phase == StepPhase::kPrefill;
    if (c.op.name == op::kAttention) {
      (prefill ? prefill_keys : decode_keys).push_back(c.op.flops_per_token / pairs[0].decode_flops);
      if (prefill) prefill_flops += c.op.flops_per_token;
      if (!prefill && decode_keys.size() <= pairs.size()) first_decode_flops += c.op.flops_per_token;
    }
    if (c.op.name == op::kIndexerTopk && !prefill) {
      decode_indexed.push_back(c.op.flops_per_token / pairs[1].index_flops);
      if (decode_keys.size() <= pairs.size()) first_decode_flops += c.op.flops_per_token;
    }
  }
  const auto n_layers = static_cast<size_t>(spec.n_layers);
  ASSERT_EQ(prefill_keys.size(), n_layers * kPrompt);
  ASSERT_EQ(decode_keys.size(), n_layers * (kNew - 1));
  ASSERT_EQ(decode_indexed.size(), 2 * (kNew - 1));  // the two sparse layers
  for (size_t l = 0; l < n_layers; ++l) {
    SCOPED_TRACE(fmt::format("layer {}", l));
    for (int64_t r = 0; r < kPrompt; ++r)
      EXPECT_EQ(prefill_keys[l * kPrompt + static_cast<size_t>(r)], row_keys(pairs[l].reach, r + 1).attended)
          << "prompt row " << r;
    for (int64_t step = 0; step < kNew - 1; ++step)
      EXPECT_EQ(decode_keys[static_cast<size_t>(step) * n_layers + l],
                row_keys(pairs[l].reach, kPrompt + step + 1).attended)
          << "decode step " << step;
  }
  for (int64_t step = 0; step < kNew - 1; ++step)  // the sparse layers' indexers score every entry
    for (size_t i = 0; i < 2; ++i)
      EXPECT_EQ(decode_indexed[static_cast<size_t>(step) * 2 + i],
                row_keys(pairs[1].reach, kPrompt + step + 1).indexed);

  // The planner: the prompt's attention as measured (its indexers: each row's scored entries, which the
  // recorder at -1 counts at the step's end instead), the first decode step's attention and indexers.
  double prompt_index = 0;
  for (const AttentionPairCost& pair : pairs)
    for (int64_t v = 1; v <= kPrompt; ++v) prompt_index += pair.index_flops * row_keys(pair.reach, v).indexed;
  EXPECT_DOUBLE_EQ(planner_attention(spec, kPrompt).attn_prefill_flops, prefill_flops + prompt_index);
  EXPECT_DOUBLE_EQ(planner_attention(spec, kPrompt + 1).attn_decode_flops, first_decode_flops);

  // And the recorder costs a longer context the same way: the decode step at 40 cached tokens.
  auto at_context = record_calls(spec, 40);
  ASSERT_TRUE(at_context.is_ok()) << at_context.status().to_string();
  double recorded = 0;
  for (const RecordedCall& c : *at_context)
    if (c.phase == StepPhase::kDecode && (c.op.name == op::kAttention || is_indexer(c.op.name)))
      recorded += c.op.flops_per_token;
  EXPECT_DOUBLE_EQ(recorded, planner_attention(spec, 41).attn_decode_flops);
}

// The catalog's sparse and compressed releases, full size (a dry run): the planner's attention and
// indexer FLOPs per decoded token at 4,097 visible positions are the recorder's at 4,096 cached tokens,
// the indexers' part on its own too (DeepSeek-V3.2 / GLM-5's lightning indexer over every key,
// MiniMax-M3's block indexer, DeepSeek-V4's over the compressed entries).
TEST(AttentionCost, PlannerDecodeFlopsAreTheRecordersOnSparseReleases) {
  for (const char* name : {"deepseek-v3.2", "glm-5", "minimax-m3", "deepseek-v4-flash"}) {
    SCOPED_TRACE(name);
    auto spec = catalog_model(name);
    ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
    auto calls = record_calls(*spec, kDefaultOpContext);
    ASSERT_TRUE(calls.is_ok()) << calls.status().to_string();
    const double attention = attention_pair_flops(*calls, StepPhase::kDecode);
    const double index = indexer_flops(*calls, StepPhase::kDecode);
    EXPECT_GT(index, 0);
    auto cost = plan::load_model_cost(name);
    ASSERT_TRUE(cost.is_ok()) << cost.status().to_string();
    double planned_index = 0;
    for (const plan::LayerCost& l : cost->layers)
      planned_index += l.index_flops_per_pair * row_keys(l.reach, kDefaultOpContext + 1).indexed;
    EXPECT_DOUBLE_EQ(planned_index, index);
    plan::Workload w;
    w.context = kDefaultOpContext + 1;
    EXPECT_DOUBLE_EQ(plan::prepare_model(*cost, w, plan::DeviceSpec{}).prefix.back().attn_decode_flops,
                     attention + index);
  }
}

// Compressed attention pools one entry per `ratio` tokens: the operator list's kv_compress rows carry
// its share per decoded token, what a long real decode spends on pooling over its steps. The golden
// checkpoint decodes 16 tokens (two windows of its heavy layer, four of its sparse ones) after a prompt
// of whole windows.
TEST(AttentionCost, PoolingIsListedAtItsShareOfADecodedToken) {
  auto model = load_model(golden_v4_dir());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  BackendOptions options;
  options.n_threads = 1;
  auto cpu = open_backend("cpu", options);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  auto list = record_op_list(model->spec, model->weights, **cpu, kDefaultOpContext);
  ASSERT_TRUE(list.is_ok()) << list.status().to_string();
  double listed = 0;
  int rows = 0;
  for (const OpSpec& op : list->ops) {
    if (op.name != op::kKvCompress) continue;
    EXPECT_EQ(op.attrs.at("amortized"), "true");
    EXPECT_TRUE(op.decode);
    listed += op.flops_per_token;
    ++rows;
  }
  EXPECT_EQ(rows, 2);  // overlapping windows of 4, plain windows of 8

  RecordingBackend recorder(cpu->get(), kDefaultOpContext);
  auto engine = Engine::create(model->spec, model->weights, recorder);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  constexpr int64_t kSteps = 16;
  const std::vector<int32_t> prompt(static_cast<size_t>(recorded_prompt_tokens(model->spec)), 5);
  recorder.set_phase(StepPhase::kPrefill);
  auto run = generate(**engine, prompt, kSteps + 1, SamplingParams{}, 0, [&](const GenerationStep&) {
    recorder.set_phase(StepPhase::kDecode);
    return true;
  });
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  double pooled = 0;
  for (const RecordedCall& c : recorder.calls())
    if (c.phase == StepPhase::kDecode && c.op.name == op::kKvCompress) pooled += c.op.flops_per_token;
  EXPECT_GT(listed, 0);
  EXPECT_DOUBLE_EQ(listed, pooled / kSteps);
}

}  // namespace
}  // namespace day0
