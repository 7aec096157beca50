#pragma once
// The bounds of the audit's logprob stage, per weight format of the target: each bound is
// max(floor, kOwnRunFactor x Day0's own figure), Day0's own figure being its own run of the same
// checkpoint in that format (BF16 activations and KV cache; MODEL's quantized weights, or a
// --quantized-reference copy, through Day0's BF16 path) measured against the float32 reference on the
// same prompts and the target's own tokens. A target may differ from the reference by a few times what
// Day0's own rounding costs, not by an arbitrary constant. Internal to src/day0/audit.
#include <string>

#include "day0/core/status.h"
#include "day0/runtime/model_loader.h"

namespace day0::audit {

// A target may differ from the reference this many times more than Day0's own run in its format.
inline constexpr double kOwnRunFactor = 4.0;
// Below these a bound does not go (Day0's f32 run is the reference: its own figures are 0).
inline constexpr double kFloorKlMean = 1e-3;
inline constexpr double kFloorAbsDlogprob = 0.25;
inline constexpr double kFloorTop1Disagreement = 0.02;
inline constexpr double kFloorPplLogRatio = 0.01;

// The target's weight format and where the audit learnt it.
struct TargetFormat {
  std::string name;    // f32 bf16 f16 fp8 mxfp4 int8 int4, or "gguf Q4_1" (the GGUF's dominant tensor type)
  std::string source;  // "--target-format", "config.json quantization_config", "GGUF tensor types", ...
  bool quantized = false;
};

// The names --target-format takes ("auto" detects from MODEL).
const std::vector<std::string>& target_format_names();

// MODEL's weight format, or the explicit `flag` ("" / "auto": detected). An explicit format that
// contradicts a quantized MODEL's is refused (the target serves MODEL's weights as they are).
Result<TargetFormat> resolve_target_format(const std::string& model, const std::string& flag);

// How Day0's own run in the target's format is made.
struct OwnRunPlan {
  bool is_reference = false;  // f32: the reference itself (own figures 0, bounds at their floors)
  std::string weights;        // the checkpoint it loads: MODEL or --quantized-reference
  std::string description;    // for the report
};

// A float MODEL served in a quantized format needs `quantized_reference` (a folder from `day0 quantize`
// or another quantized copy of MODEL, in that format): without it the bound cannot be measured and the
// audit says so rather than guessing. A quantized_reference whose format differs is refused too.
Result<OwnRunPlan> plan_own_run(const std::string& model, const TargetFormat& format,
                                const std::string& quantized_reference);

// Day0's own run: `plan.weights` loaded as a BF16 run loads it (integer kernels for packed weights),
// BF16 activations and KV cache on the cpu backend.
struct OwnRun {
  LoadedModel model;
  EngineHandle engine;
};
Result<OwnRun> open_own_run(const OwnRunPlan& plan);

// One bound: the target's figure, Day0's own, and the bound (max(floor, factor x own)).
struct MeasuredBound {
  double target = 0;
  double own = 0;
  double bound = 0;
};
inline double bound_from_own(double own, double floor) {
  return std::max(floor, kOwnRunFactor * own);
}

}  // namespace day0::audit
