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

struct AlignRequest {
  std::string model;           // checkpoint folder
  std::string reference_path;  // day0-reference/1 dump ("" only with against_reference)
  std::string backend = "cpu";
  ActivationPrecision precision = ActivationPrecision::kF32;
  // Unset: F32 with F32 activations (an exact comparison keeps an exact cache), BF16 with BF16.
  std::optional<KvDtype> kv_dtype;
  MlaMode mla = MlaMode::kAuto;
  int n_threads = 0;
  // Compare `backend` against our `reference` backend (same precision) instead of a dump. Prompts
  // come from reference_path when given, else from prompt_ids, else 3 seeded random prompts.
  bool against_reference = false;
  std::string prompt_ids;
  int64_t greedy_steps = 8;                   // continuation length when prompts do not come from a dump
  std::optional<AlignThresholds> thresholds;  // default: default_thresholds(precision)
};

Result<AlignReport> align_model(const AlignRequest& request);

}  // namespace day0
