#pragma once
// Built-in clusters from public spec sheets, "NODESxDEVICESxDEVICE" names, and the local machine.
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/plan/cluster.h"

namespace day0::plan {

// Device keys of the built-in nodes: H200, B200, H100, H800, A100-80G, MI300X, 910B, CPU.
std::vector<std::string> preset_device_names();
// The single-node presets: "8xH200", ..., "8x910B", "1xCPU".
std::vector<std::string> preset_names();

// "8xH200" (one node of 8), "2x8xH200" (two such nodes), "1xCPU", "cpu-node" (= 1xCPU), "local" (this
// machine, see detect_local_cluster). Device keys are case-insensitive.
Result<ClusterSpec> resolve_preset(std::string_view name);

// A preset name, else a JSON cluster file.
Result<ClusterSpec> resolve_cluster(const std::string& preset_or_path);

// This machine as a one-device node: memory from /proc/meminfo, cores from nproc, SIMD width and clock
// from /proc/cpuinfo. Bandwidth is an estimate (20 GB/s a core, at most 460 GB/s): measure and write a
// cluster file when it matters.
Result<ClusterSpec> detect_local_cluster();
// The same from given file contents (tests).
Result<ClusterSpec> local_cluster_from(std::string_view meminfo, std::string_view cpuinfo, int64_t n_cpus);

}  // namespace day0::plan
