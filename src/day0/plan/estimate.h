#pragma once
// Memory and time of one parallel layout. These are estimates from first principles (a roofline per
// layer plus idealised collectives), not measurements; plan_report.h prints what they leave out.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "day0/plan/cluster.h"
#include "day0/plan/model_cost.h"
#include "day0/plan/workload.h"

namespace day0::plan {

// TP x PP x (DP attention replicas); experts split over EP ranks of each stage (EP divides TP x DP, the
// rest of the stage shards each expert: expert-TP = TP x DP / EP).
struct Parallelism {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  int64_t ep = 1;
  int64_t stage_devices() const { return tp * dp; }
  int64_t devices() const { return tp * dp * pp; }
  int64_t expert_tp() const { return stage_devices() / ep; }
  bool operator==(const Parallelism&) const = default;
};

// Items of one device's memory, bytes (the most loaded pipeline stage).
enum class MemoryItem : int {
  kAttention,
  kDenseMlp,
  kSharedExperts,
  kRoutedExperts,
  kEmbedding,
  kLmHead,
  kOtherWeights,  // routers, norms
  kKvCache,
  kActivations,  // prefill chunk activations, MoE dispatch buffers, logits
  kReserve,      // runtime context, collective buffers, fragmentation
};
inline constexpr int kMemoryItems = 10;
const char* memory_item_name(MemoryItem item);

struct MemoryEstimate {
  std::array<double, kMemoryItems> items{};
  int64_t stage = 0;  // which stage is the most loaded
  double total = 0;
  double capacity = 0;
  double weights() const;
  double item(MemoryItem i) const { return items[static_cast<int>(i)]; }
  // KV room left once everything else is placed, and what it holds.
  double kv_free_bytes = 0;
  double kv_capacity_tokens = 0;         // all replicas together
  int64_t max_sequences_at_context = 0;  // all replicas together
};

struct TimeEstimate {
  double ttft = 0;          // seconds: prefill of one context-long prompt (chunked, pipelined)
  double tpot = 0;          // seconds per output token at the full context, batch = concurrency
  double tokens_per_s = 0;  // decode throughput of the plan at the given concurrency
  double tokens_per_s_per_device = 0;
  double comm_share = 0;  // fraction of TPOT spent in collectives
  bool decode_memory_bound = true;
};

// Additive per-layer quantities at one workload; PreparedModel keeps their prefix sums.
struct LayerSums {
  std::array<double, kWeightGroups> bytes{};  // at the workload's weight precision
  std::array<double, kWeightGroups> params{};
  double kv_seq_bytes = 0;        // cached bytes of one full-context sequence (workload's KV dtype)
  double attn_decode_flops = 0;   // one new token against the full context
  double attn_prefill_flops = 0;  // a whole context-long prompt, causal
  double n_layers = 0;
  double n_moe_layers = 0;
  double n_heads_norm_layers = 0;  // layers whose q/k norm spans all heads (an all-reduce under TP)
};

// Per-layer costs at one workload's precisions and context, with prefix sums, so that each layout is
// costed in O(PP).
struct PreparedModel {
  const ModelCost* model = nullptr;
  std::vector<std::array<double, kWeightGroups>> layer_bytes;  // at the workload's weight precision
  std::vector<double> kv_seq_bytes;  // cached bytes one full-context sequence leaves, per layer
  double embedding_bytes = 0;
  double lm_head_bytes = 0;  // tied: the embedding's (a last stage of PP > 1 needs its own copy)
  double final_norm_bytes = 0;
  double linear_peak = 0;  // FLOP/s of the matmuls at the weight precision on the cluster's device
  double attention_peak = 0;
  std::vector<LayerSums> prefix;  // prefix[i] = sums over layers [0, i)
};
PreparedModel prepare_model(const ModelCost& model, const Workload& workload, const DeviceSpec& device);

// Layers [first, last) of stage `stage` (stages differ by at most one layer; later stages take the extra).
std::pair<int64_t, int64_t> stage_layers(int64_t n_layers, int64_t pp, int64_t stage);

MemoryEstimate estimate_memory(const PreparedModel& prepared, const ClusterSpec& cluster,
                               const Workload& workload, const Parallelism& par);
TimeEstimate estimate_time(const PreparedModel& prepared, const ClusterSpec& cluster,
                           const Workload& workload, const Parallelism& par);

}  // namespace day0::plan
