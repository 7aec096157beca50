#pragma once
// The engine settings a command line names (run and serve: --dtype, --kv-dtype, --tp / --pp / --ep,
// --dp-attention, --moe-combine, --comm-overlap, --micro-batches), checked together and turned into
// EngineOptions in one place, so that every command accepts and refuses the same combinations.
#include <string>

#include "day0/core/status.h"
#include "day0/dist/process_groups.h"
#include "day0/runtime/engine.h"

namespace day0 {

struct EngineSettings {
  std::string dtype = "f32";               // activation precision: f32 | bf16
  std::string kv_dtype = "bf16";           // KV cache element type: bf16 | f32 | fp8
  dist::ParallelLayout layout;             // TP x PP x EP ranks
  int dp_attention = 1;                    // attention data-parallel degree: 1, or EP with TP 1 and PP 1
  std::string moe_combine = "all-reduce";  // under EP: all-reduce | all-to-all
  bool comm_overlap = false;               // EngineOptions::comm_overlap
  int micro_batches = 0;                   // under PP: micro-batches a step is cut into (0: two per stage)
};

// The options these settings give (communicators unset), or an error naming the flags whose combination
// is refused: InvalidArgument for a setting that needs another (--micro-batches without --pp 2), and
// Unsupported for a layout not implemented yet.
Result<EngineOptions> engine_options_from(const EngineSettings& settings);

// Points the options at the loaded model's process groups: TP, EP, the MoE group of the stage, PP.
void attach_process_groups(EngineOptions& options, const dist::ProcessGroups& groups);

}  // namespace day0
