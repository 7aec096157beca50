#include "day0/plan/workload.h"

#include <fmt/format.h>

#include <cmath>

namespace day0::plan {

namespace {
constexpr int64_t kMaxTokens = int64_t{1} << 24;
}

std::string_view weight_precision_name(WeightPrecision p) {
  switch (p) {
    case WeightPrecision::kCheckpoint:
      return "checkpoint";
    case WeightPrecision::kBF16:
      return "bf16";
    case WeightPrecision::kFP8:
      return "fp8";
    case WeightPrecision::kINT8:
      return "int8";
    case WeightPrecision::kINT4:
      return "int4";
  }
  return "?";
}

std::string_view kv_precision_name(KvPrecision p) {
  return kv_dtype_name(p);
}

std::string_view objective_name(Objective o) {
  switch (o) {
    case Objective::kMinLatency:
      return "min-latency";
    case Objective::kMaxThroughputPerDevice:
      return "max-throughput-per-device";
    case Objective::kFewestDevices:
      return "fewest-devices";
  }
  return "?";
}

Result<WeightPrecision> parse_weight_precision(std::string_view name) {
  for (auto p : {WeightPrecision::kCheckpoint, WeightPrecision::kBF16, WeightPrecision::kFP8,
                 WeightPrecision::kINT8, WeightPrecision::kINT4}) {
    if (name == weight_precision_name(p)) return p;
  }
  return invalid_argument(
      fmt::format("--weights: unknown precision '{}' (expected checkpoint, bf16, fp8, int8, int4)", name));
}

Result<KvPrecision> parse_kv_precision(std::string_view name) {
  if (name == "fp16") return KvPrecision::kBF16;  // same width
  if (auto dtype = parse_kv_dtype(name)) return *dtype;
  return invalid_argument(
      fmt::format("--kv-dtype: unknown precision '{}' (expected f32, bf16, fp16, fp8)", name));
}

Result<Objective> parse_objective(std::string_view name) {
  for (auto o : {Objective::kMinLatency, Objective::kMaxThroughputPerDevice, Objective::kFewestDevices}) {
    if (name == objective_name(o)) return o;
  }
  return invalid_argument(fmt::format(
      "--objective: unknown objective '{}' (expected min-latency, max-throughput-per-device, fewest-devices)",
      name));
}

Status validate_workload(const Workload& w) {
  auto in_range = [](int64_t v, int64_t lo, int64_t hi, const char* what) -> Status {
    if (v < lo || v > hi)
      return invalid_argument(fmt::format("{}: expected {}..{}, found {}", what, lo, hi, v));
    return Status::ok();
  };
  D0_RETURN_IF_ERROR(in_range(w.context, 1, kMaxTokens, "context"));
  D0_RETURN_IF_ERROR(in_range(w.concurrency, 1, kMaxTokens, "concurrency"));
  D0_RETURN_IF_ERROR(in_range(w.prefill_chunk, 1, kMaxTokens, "prefill chunk"));
  D0_RETURN_IF_ERROR(in_range(w.kv_block_tokens, 1, 4096, "KV block tokens"));
  D0_RETURN_IF_ERROR(in_range(w.redundant_experts, 0, 1 << 16, "redundant experts"));
  D0_RETURN_IF_ERROR(in_range(w.tp, 0, 1 << 16, "--tp"));
  if (!std::isfinite(w.reserve_fraction) || w.reserve_fraction < 0 || w.reserve_fraction >= 0.9) {
    return invalid_argument(fmt::format("reserve fraction: expected [0, 0.9), found {}", w.reserve_fraction));
  }
  return Status::ok();
}

}  // namespace day0::plan
