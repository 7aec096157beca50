#pragma once
// What the deployment must serve: context, concurrency, precisions, what to optimise, and the knobs of
// placement the planner may use.
#include <cstdint>
#include <string>
#include <string_view>

#include "day0/core/status.h"
#include "day0/model/kv_dtype.h"

namespace day0::plan {

// Storage of the decoder's projection weights; embeddings, lm_head, norms and routers stay 16-bit.
enum class WeightPrecision { kCheckpoint, kBF16, kFP8, kINT8, kINT4 };
// The KV cache's element type: the engine's KvDtype (f32, bf16, fp8 e4m3).
using KvPrecision = KvDtype;
enum class Objective { kMinLatency, kMaxThroughputPerDevice, kFewestDevices };

struct Workload {
  int64_t context = 8192;    // tokens per sequence (prompt + output); TTFT prefills a prompt this long
  int64_t concurrency = 16;  // sequences decoded together
  WeightPrecision weights = WeightPrecision::kCheckpoint;
  KvPrecision kv = KvPrecision::kBF16;
  Objective objective = Objective::kMinLatency;
  int64_t prefill_chunk = 8192;    // tokens per prefill step (chunked prefill)
  int64_t kv_block_tokens = 16;    // paged KV block size
  int64_t redundant_experts = 0;   // extra physical expert copies in all (EPLB), spread over EP ranks
  double reserve_fraction = 0.10;  // of device memory: runtime context, collectives' buffers, fragmentation
  bool allow_cross_node_tp = false;
  bool allow_uneven_pp = true;  // stages may differ by one layer (vLLM runs 61-layer models at PP2)
  int64_t tp = 0;               // only layouts of this tensor-parallel degree (0: any)
};

std::string_view weight_precision_name(WeightPrecision p);  // "checkpoint", "bf16", "fp8", "int8", "int4"
std::string_view kv_precision_name(KvPrecision p);          // "f32", "bf16", "fp8"
std::string_view objective_name(Objective o);  // "min-latency", "max-throughput-per-device", "fewest-devices"
Result<WeightPrecision> parse_weight_precision(std::string_view name);
Result<KvPrecision> parse_kv_precision(std::string_view name);
Result<Objective> parse_objective(std::string_view name);

// Bounds every field (context and concurrency positive and at most 2^24, reserve in [0, 0.9), ...).
Status validate_workload(const Workload& w);

}  // namespace day0::plan
