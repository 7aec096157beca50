#pragma once
// Memory and time of one parallel layout. These are estimates from first principles (a roofline per
// layer, idealised collectives, and the waits at them that runs show: CommTime), not measurements;
// plan_report.h prints what they leave out.
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

// Where the mean rank of a layout spends its time in communication, seconds. Transfer is what the
// links cost; the three waits are time a rank sits in a collective or a pipeline receive for a peer
// that has not arrived, which is most of what runs measure (docs/distributed.md).
struct CommTime {
  double transfer = 0;   // latency + bytes / bandwidth of every collective and pipeline hop
  double skew = 0;       // ranks reach each collective at different times (ClusterSpec::sync_skew)
  double imbalance = 0;  // the EP rank with the most routed work finishes last (expert_load_imbalance)
  double bubble = 0;     // a pipeline stage waiting while the other stages work
  double wait() const { return skew + imbalance + bubble; }
  double total() const { return transfer + wait(); }
};

struct TimeEstimate {
  double ttft = 0;          // seconds: prefill of one context-long prompt (chunked, pipelined)
  double tpot = 0;          // seconds per output token at the full context, batch = concurrency
  double tokens_per_s = 0;  // decode throughput of the plan at the given concurrency
  double tokens_per_s_per_device = 0;
  double comm_share = 0;  // fraction of TPOT spent transferring: decode.transfer / tpot
  double idle_ratio = 0;  // fraction of TPOT in communication, transfer and waits: decode.total() / tpot
  CommTime decode;        // within one TPOT
  CommTime prefill;       // within one TTFT
  bool decode_memory_bound = true;
  // Communication over a run of one prompt and `decode_steps` decode steps, over its whole time: the
  // figure `day0 run --json` reports per rank as the communication idle ratio.
  double run_idle_ratio(double decode_steps) const;
};

// E[max of n independent standard normals] by Blom's approximation, Phi^-1((n - 0.375) / (n + 0.25))
// (within 5% of the exact 0.564 at n = 2, within 1% from n = 4); 0 for n <= 1.
double expected_max_standard_normal(int64_t n);

// The skew wait of the mean rank of a group of `ranks` at one collective, as a fraction of its compute
// since the previous one. If each rank's compute is its mean times (1 + e) with e ~ N(0, sd^2), the
// collective ends at the latest arrival and the mean rank waits sd x E[max of N standard normals] x
// compute. `sync_skew` is that wait measured for N = 2, so the fraction is sync_skew x E[max of N] /
// E[max of 2]; 0 for one rank. Proportional to compute, not its square root: the measured waits were
// 0.11-0.12 of the compute between all-reduces 4 ms apart (bench shapes) and 0.2 at 4 us apart (a
// miniature), where independent noise would have given ratios 30x apart.
double sync_wait_fraction(double sync_skew, int64_t ranks);

// Expected max / mean, over `ep` ranks holding equal consecutive blocks of `n_experts` experts, of the
// routed work of a step of `tokens` tokens that each pick `experts_per_token` experts uniformly at
// random: `picks` (token-expert pairs, what the expert FLOPs follow) and `experts` (distinct experts
// touched, what the weight bytes read follow). 1 for ep = 1. Each rank's count is taken as an
// independent binomial (picks: tokens x k trials of 1/ep; experts: n_experts / ep trials of the chance
// that an expert gets any of the tokens) and the expectation of their maximum is summed exactly while
// the mean count is small (<= 32) and from the normal approximation above that; within a few percent
// of a simulated routing (tests/plan/time_model_test.cpp). Real routers are not uniform: this is the
// least imbalance to expect, and redundant experts (EPLB) are not credited against it.
struct ExpertLoadImbalance {
  double picks = 1;
  double experts = 1;
};
ExpertLoadImbalance expert_load_imbalance(int64_t n_experts, double experts_per_token, int64_t ep,
                                          double tokens);

// Additive per-layer quantities at one workload; PreparedModel keeps their prefix sums.
struct LayerSums {
  std::array<double, kWeightGroups> bytes{};  // at the workload's weight precision
  std::array<double, kWeightGroups> params{};
  double kv_seq_bytes = 0;        // cached bytes of one full-context sequence (workload's KV dtype)
  double kv_read_bytes = 0;       // what one decode step reads of them (block-sparse: fewer keys)
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
  std::vector<double> kv_seq_bytes;   // cached bytes one full-context sequence leaves, per layer
  std::vector<double> kv_read_bytes;  // what one decode step of that sequence reads of them, per layer
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
