#pragma once
// The whole `day0 align` job as one library call (the CLI and the adapt pipeline call it): load the
// model, open the backend, run the reference's prompts (or, with against_reference, the same prompts
// on the `reference` backend) and compare.
#include <optional>
#include <string>

#include "day0/align/align_runner.h"
#include "day0/core/status.h"
#include "day0/runtime/engine.h"

namespace day0 {

// Thresholds given on the command line; the others are default_thresholds(the precision measured).
struct AlignThresholdOverrides {
  std::optional<double> max_abs_err_of_range, kl_mean, kl_max, min_same_top1, max_ppl_ratio_dev;
  std::optional<int64_t> greedy_top_n;
  std::optional<double> layer_cosine, layer_abs;
  AlignThresholds apply(AlignThresholds t) const;
};

struct AlignRequest {
  std::string model;           // checkpoint folder
  std::string reference_path;  // day0-reference/1 dump ("" only with against_reference)
  // The measured engine's settings. Each one unset (an empty backend) follows the dump's recorded
  // setting when the dump is day0's own (`day0 run --dump`, ReferenceDump::has_engine_settings), so
  // that run-then-align compares like with like; otherwise the default: cpu, F32 activations, MLA
  // auto, and a KV cache of F32 with F32 activations (an exact comparison keeps an exact cache),
  // BF16 with BF16. A setting given that differs from the dump's is reported (AlignReport::warnings).
  std::string backend;
  std::optional<ActivationPrecision> precision;
  std::optional<KvDtype> kv_dtype;
  std::optional<MlaMode> mla;
  int n_threads = 0;
  // Compare `backend` against our `reference` backend (same precision) instead of a dump. Prompts
  // come from reference_path when given, else from prompt_ids, else 3 seeded random prompts.
  bool against_reference = false;
  std::string prompt_ids;
  int64_t greedy_steps = 8;  // continuation length when prompts do not come from a dump
  AlignThresholdOverrides thresholds;
};

Result<AlignReport> align_model(const AlignRequest& request);

}  // namespace day0
