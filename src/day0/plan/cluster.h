#pragma once
// A cluster the planner places a model on: identical nodes of identical devices, with the links that join
// devices inside a node and across nodes. Units are SI throughout (bytes, bytes/s, FLOP/s, seconds).
#include <cstdint>
#include <string>
#include <string_view>

#include "day0/core/status.h"

namespace day0::plan {

// One accelerator (or one CPU socket/node). Peak rates are dense (no structured sparsity).
struct DeviceSpec {
  std::string name;             // "H200", "MI300X", ...
  double memory_bytes = 0;      // usable device memory
  double memory_bandwidth = 0;  // bytes/s
  double peak_flops_bf16 = 0;   // FLOP/s, dense BF16/FP16
  double peak_flops_fp8 = 0;    // FLOP/s, dense FP8; 0 = no FP8 math (FP8 weights run as BF16)
  double peak_flops_int8 = 0;   // OP/s, dense INT8; 0 = no INT8 math
  bool operator==(const DeviceSpec&) const = default;
};

// A link as one device sees it: bandwidth in one direction, and the fixed cost of one message.
struct LinkSpec {
  double bandwidth = 0;  // bytes/s per device per direction
  double latency = 0;    // seconds per message (hop + software)
  bool operator==(const LinkSpec&) const = default;
};

// Default ClusterSpec::sync_skew: measured on this project's 2-core host with two MPI ranks of one
// thread each (bench-dense-1b TP 2: 0.485 s waited in 1,088 all-reduces against 4.01 s of the rest,
// 0.12; bench-moe-a02b TP 2: 0.13 s against 1.17 s, 0.11; both the mean of the two ranks).
inline constexpr double kDefaultSyncSkew = 0.12;

struct ClusterSpec {
  std::string name;  // "8xH200", "2x8xH200", a file's "name"
  int64_t nodes = 1;
  int64_t devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;  // NVLink / Infinity Fabric / HCCS
  LinkSpec inter_node;  // InfiniBand / RoCE, per device
  // How unevenly ranks reach a collective: the time the mean rank of a two-rank group waits at each
  // synchronising collective for its peer, as a fraction of its compute since the previous one. Ranks
  // of one layout run the same work, but not in the same time (OS noise, shared cores, clocks, cache
  // misses), and each collective ends when the last rank arrives. Larger groups wait longer: the
  // expected maximum of N arrivals (estimate.h, sync_wait_fraction). In [0, 1].
  double sync_skew = kDefaultSyncSkew;
  int64_t total_devices() const { return nodes * devices_per_node; }
  bool operator==(const ClusterSpec&) const = default;
};

// Checks every field is present, finite and positive (fp8/int8 peaks and sync_skew may be 0, sync_skew
// at most 1); bounds node counts.
Status validate_cluster(const ClusterSpec& cluster);

// Parses the JSON cluster description documented in README "### plan". `origin` names the source in
// messages (a file path).
Result<ClusterSpec> parse_cluster_json(std::string_view text, const std::string& origin);
Result<ClusterSpec> load_cluster_file(const std::string& path);

// The same cluster with `nodes` nodes (the planner grows a cluster to find the smallest that fits).
ClusterSpec with_nodes(const ClusterSpec& cluster, int64_t nodes);
// "8xH200" for one node, "2x8xH200" for two.
std::string cluster_shape_name(const ClusterSpec& cluster);

}  // namespace day0::plan
