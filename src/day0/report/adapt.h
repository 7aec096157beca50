#pragma once
// `day0 adapt`: the Day-0 checklist as one pipeline. Stages run in order; each ends pass / fail /
// skipped-with-reason with its evidence and its time. Later stages skip (saying why) when what they
// need failed earlier. Stage ids: structure, coverage, weights, miniature, alignment, generation,
// plan, performance, stability.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/kv_dtype.h"
#include "day0/report/compare.h"
#include "day0/report/report.h"

namespace day0::report {

inline constexpr const char* kDefaultAdaptModel = "deepseek-v3";

// Upper bound of --prompt-tokens and --new-tokens: the runs go through the miniature, whose
// context is small; anything above is a usage error before a stage starts.
inline constexpr int kMaxAdaptRunTokens = 4096;

struct AdaptOptions {
  std::string model = kDefaultAdaptModel;  // folder, config.json or catalog name
  std::string reference_dump;              // --reference: a day0-reference/1 dump of the real model
  // --reference-python: the Python (with torch + transformers) that dumps the miniature through
  // Hugging Face transformers so the miniature stage also aligns against it. Empty: found by itself
  // (DAY0_REFERENCE_PYTHON, /opt/refvenv/bin/python, python3), skipped with the reason when none can
  // import transformers; "none": not tried; a path: must work, or the stage fails.
  std::string reference_python;
  std::string cluster;  // --cluster: preset or file; empty = this machine
  std::string backend = "cpu";
  // --kv-dtype: the KV cache of the run target (performance, stability). Alignment keeps its own
  // choice (F32 for the F32 comparison), and says so in its evidence.
  KvDtype kv_dtype = KvDtype::kBF16;
  std::string out_dir = "out";
  std::string compare_path;                  // --compare OLD/report.json
  std::vector<std::string> optional_stages;  // failures of these do not fail the run
  bool require_all = false;                  // --require-all: a skipped required stage fails the run
  bool strict_ops = false;
  bool strict_config = false;  // --strict-config: an unknown config key fails the structure stage
  uint64_t seed = 0;
  // Miniature and performance.
  int prompt_tokens = 48;
  int new_tokens = 16;
  // Stability.
  int soak_requests = 200;
  double soak_seconds = 20.0;
  uint64_t soak_max_growth_bytes = 32ull << 20;
  // Generation spot checks: a day0-spot-reference/1 file (transformers' greedy continuations), the
  // unquantized base of a quantized MODEL, and the mean agreement (tokens before the first divergence,
  // over the reference's length) below which the stage fails.
  std::string spot_reference;
  std::string spot_base;
  double spot_min_agreement = 0.5;
  CompareMargins margins;
  // --target URL: the audit's stages (audit/audit.h) against an OpenAI-compatible server serving
  // MODEL run after the checklist, in the same report. Empty: not run.
  std::string target;
  std::string served_model_name;
  std::string target_api_key;
  std::vector<int> target_concurrency = {1, 4, 16, 64};
  double target_soak_seconds = 0;
  std::string target_format;        // --target-format (audit.h)
  std::string quantized_reference;  // --quantized-reference (audit.h)
  // --strict: a stage's warnings fail it (report::apply_strict); without it they are shown and counted.
  bool strict = false;
};

struct StageDescriptor {
  std::string id;
  std::string title;
};

// The stages in the order they run (without --target's).
const std::vector<StageDescriptor>& adapt_stages();
// The stages a run with these options has: adapt_stages(), then the audit's under --target.
std::vector<StageDescriptor> adapt_stages_for(const AdaptOptions& options);

// Runs the checklist. `on_stage` is called after each stage (progress). Returns the report (its
// verdict already computed, regressions included when compare_path is set), or a Status for bad
// input that makes a report meaningless (unknown stage name, unreadable --compare file).
Result<Report> run_adapt(const AdaptOptions& options,
                         const std::function<void(const StageResult&)>& on_stage);

}  // namespace day0::report
