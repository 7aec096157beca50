#pragma once
// `day0 align` as a library call: run the engine on a reference dump's prompts (logits, per-layer
// hidden states, greedy continuation with the KV cache) and compare logits, layers and generation
// against the reference with per-precision thresholds. Also used by `adapt` and by `--against`.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/align/greedy_check.h"
#include "day0/align/layer_metrics.h"
#include "day0/align/logit_metrics.h"
#include "day0/align/reference_dump.h"
#include "day0/runtime/engine.h"

namespace day0 {

struct AlignThresholds {
  double max_abs_err_of_range = 1e-4;  // logits: max |ref - engine| <= this x (max - min of ref logits)
  double kl_mean = 1e-6;               // KL(ref || engine), nats
  double kl_max = 1e-5;
  double min_same_top1 = 1.0;       // share of positions with the same argmax
  double max_ppl_ratio_dev = 1e-4;  // |ppl_engine / ppl_ref - 1|
  int64_t greedy_top_n = 5;         // vLLM-style check at the first divergence
  LayerRule layers;                 // msprobe pass rule per layer
};

// Defaults per activation precision (README `### align` gives the measurements behind them).
AlignThresholds default_thresholds(ActivationPrecision precision);

// One engine setting of the measured side and where it came from.
struct AlignSetting {
  std::string key;     // "dtype", "kv_dtype", "backend", "mla" (its flag: --dtype, --kv-dtype, ...)
  std::string value;   // "bf16", "cpu", ...
  std::string source;  // "flag" (given), "dump" (the dump's recorded settings), "default"
};
// "kv dtype bf16 (from the dump's settings)", "dtype f32 (--dtype)", "mla auto (default)".
std::string align_setting_text(const AlignSetting& setting);

// A prompt compared only in part because a sparse-attention selection tied (ReferencePrompt's
// selection_ties): the first tied row decides which keys it attends to by the tie rule, and every later
// row reads that row's state, so nothing from there on says anything about either side's arithmetic.
struct SelectionTieCut {
  int64_t prompt = 0;
  int64_t rows = 0, of_rows = 0;    // prompt rows compared (those before the first tie), of T
  int64_t steps = 0, of_steps = 0;  // greedy steps compared, of N
};

struct AlignReport {
  std::string model;
  std::string backend;
  std::string precision;
  std::string kv_dtype;   // KV cache element type of the measured engine
  std::string reference;  // producer + version + dtype of the reference
  std::vector<AlignSetting> settings;
  bool settings_from_dump = false;  // the reference is a day0 dump that records its settings
  // Where the two sides' settings differ on purpose or by necessity (an explicit flag against the
  // dump's setting, a distributed dump): the comparison measures that difference too.
  std::vector<std::string> warnings;
  int64_t prompts = 0;
  LogitSummary logits;
  LayerReport layers;
  std::vector<GreedyCheck> greedy;        // one per prompt that has a reference continuation
  std::vector<SelectionTieCut> tie_cuts;  // prompts compared only up to a tied selection
  AlignThresholds thresholds;
  std::vector<std::string> failures;  // every threshold crossed, readable
  bool pass() const { return failures.empty(); }
};

// The engine's own dump entry for one prompt: logits and hidden states of a full prefill, and a
// greedy continuation of `greedy_steps` tokens decoded one at a time with the KV cache; where a layer
// selects keys with an indexer, the rows and steps whose selection tied.
// The engine's error (a kernel failure, non-finite logits) is returned.
Result<ReferencePrompt> run_prompt(Engine& engine, std::span<const int64_t> ids, int64_t greedy_steps,
                                   bool hidden = true);
// All prompts of `ref` (continuations as long as the reference's), as a dump of the engine.
Result<ReferenceDump> run_reference_prompts(Engine& engine, const ReferenceDump& ref,
                                            const std::string& producer);

// Compares two dumps of the same prompts; `engine` plays the engine's side.
AlignReport compare_dumps(const ReferenceDump& ref, const ReferenceDump& engine,
                          const AlignThresholds& thresholds);

nlohmann::json align_report_json(const AlignReport& report);
// The readable report: logits table, layer-wise table, greedy check, verdict.
std::string align_report_text(const AlignReport& report);

}  // namespace day0
