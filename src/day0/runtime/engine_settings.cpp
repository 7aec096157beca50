#include "day0/runtime/engine_settings.h"

#include <fmt/format.h>

#include "day0/core/error.h"
#include "day0/model/kv_dtype.h"

namespace day0 {

Result<EngineOptions> engine_options_from(const EngineSettings& s) {
  const dist::ParallelLayout& l = s.layout;
  D0_RETURN_IF_ERROR(dist::validate_layout(l));
  EngineOptions eo;
  if (s.dtype == "bf16") {
    eo.precision = ActivationPrecision::kBF16;
  } else if (s.dtype != "f32") {
    return invalid_argument(fmt::format("--dtype {:?}: expected f32 or bf16", s.dtype));
  }
  const auto kv_dtype = parse_kv_dtype(s.kv_dtype);
  if (!kv_dtype)
    return invalid_argument(fmt::format("--kv-dtype {:?}: expected bf16, f32 or fp8", s.kv_dtype));
  eo.kv_dtype = *kv_dtype;
  if (s.moe_combine == "all-to-all") {
    eo.moe_combine = MoeCombine::kAllToAll;
  } else if (s.moe_combine != "all-reduce") {
    return invalid_argument(
        fmt::format("--moe-combine {:?}: expected all-reduce or all-to-all", s.moe_combine));
  }
  if (s.micro_batches < 0) return invalid_argument("--micro-batches: expected 0 or more");
  if (s.micro_batches > 0 && l.pp < 2) {
    return invalid_argument("--micro-batches cuts steps between pipeline stages: it needs --pp 2 or more");
  }
  eo.pipeline_micro_batches = s.micro_batches;
  eo.comm_overlap = s.comm_overlap;
  if (s.dp_attention != 1) {
    if (s.dp_attention != l.ep || l.tp != 1 || l.pp != 1) {
      return unsupported(fmt::format(
          "--dp-attention {} with --ep {}, --tp {}, --pp {}: attention data parallelism runs with "
          "DP = EP, TP 1 and PP 1 (each EP rank runs its own requests); other layouts not yet",
          s.dp_attention, l.ep, l.tp, l.pp));
    }
    // Every EP rank runs its own sequences (a DP replica); MoE layers exchange their picks.
    eo.data_parallel_attention = true;
    eo.moe_combine = MoeCombine::kAllToAll;
  }
  if (eo.moe_combine == MoeCombine::kAllToAll && l.ep < 2) {
    return invalid_argument(
        "--moe-combine all-to-all dispatches tokens over expert-parallel ranks: it needs --ep 2 or more");
  }
  return eo;
}

void attach_process_groups(EngineOptions& options, const dist::ProcessGroups& groups) {
  options.tensor_parallel = groups.tp.get();
  options.expert_parallel = groups.ep.get();
  options.moe_group = groups.stage.get();
  options.pipeline = groups.pp.get();
}

}  // namespace day0
