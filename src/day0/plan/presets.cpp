#include "day0/plan/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace day0::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTera = 1e12;
// Small-message latencies are typical NCCL/RCCL/HCCL figures, not spec-sheet numbers.
constexpr double kNvlinkLatency = 3e-6;
constexpr double kNetworkLatency = 10e-6;
// Measured, not a spec figure: a two-rank all-reduce over shared memory took 0.76 us on this project's
// 2-core host (a dense miniature, TP 2, 384 all-reduces in 0.29-0.32 ms). The ring model charges a
// two-rank all-reduce two messages (estimate.cpp), so 0.38 us a message; an upper bound, since the
// 0.76 us include the ranks' waits for each other.
constexpr double kSharedMemoryLatency = 0.38e-6;
// Accelerator presets' sync_skew (cluster.h) is assumed, not measured here: a GPU kernel of one shape
// takes the same time to within a few percent from call to call, and CUDA graphs take the host's noise
// off the launch. The CPU presets keep the figure measured on CPU ranks (kDefaultSyncSkew).
constexpr double kAcceleratorSyncSkew = 0.02;

// HBM capacities on spec sheets ("80GB") are binary: nvidia-smi shows 81,559 MiB on an H100 80GB.
struct NodePreset {
  const char* key;
  int64_t devices_per_node;
  DeviceSpec device;
  LinkSpec intra;
  LinkSpec inter;
  double sync_skew = kAcceleratorSyncSkew;
};

const std::vector<NodePreset>& node_presets() {
  static const std::vector<NodePreset> kPresets = {
      // NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, BF16 1,979 / FP8 3,958 /
      // INT8 3,958 TFLOPS "with sparsity" (dense = half), NVLink 900 GB/s (both directions together).
      // HGX H200: one ConnectX-7 400 Gb/s NIC per GPU.
      {"H200",
       8,
       {"H200", 141 * kGiB, 4.8e12, 989 * kTera, 1979 * kTera, 1979 * kTera},
       {450 * kGB, kNvlinkLatency},
       {50 * kGB, kNetworkLatency}},
      // NVIDIA DGX B200 / HGX B200 datasheets, per GPU of the 1,000 W HGX board: 180 GB HBM3e (1,440 GB
      // over 8), 8 TB/s (64 TB/s over 8), BF16 4.5 / FP8 9 / INT8 9 / FP4 18 PFLOPS "with sparsity"
      // (dense = half; the planner has no FP4 rate, FP4 weights are read at their bytes and multiplied at
      // FP8's), NVLink 5 1.8 TB/s (both directions together); DGX B200: one ConnectX-7 400 Gb/s NIC per GPU.
      {"B200",
       8,
       {"B200", 180 * kGiB, 8e12, 2250 * kTera, 4500 * kTera, 4500 * kTera},
       {900 * kGB, kNvlinkLatency},
       {50 * kGB, kNetworkLatency}},
      // NVIDIA H100 Tensor Core GPU datasheet (SXM): 80 GB HBM3, 3.35 TB/s, BF16 989 / FP8 1,979 /
      // INT8 1,979 dense, NVLink 900 GB/s; DGX H100: 8x ConnectX-7 400 Gb/s.
      {"H100",
       8,
       {"H100", 80 * kGiB, 3.35e12, 989 * kTera, 1979 * kTera, 1979 * kTera},
       {450 * kGB, kNvlinkLatency},
       {50 * kGB, kNetworkLatency}},
      // NVIDIA H800 SXM5 (China variant of H100): same HBM3 and Tensor Cores, NVLink 400 GB/s.
      // arXiv:2412.19437 §3.1: H800 nodes, NVLink ~160 GB/s achieved, InfiniBand 50 GB/s per GPU.
      {"H800",
       8,
       {"H800", 80 * kGiB, 3.35e12, 989 * kTera, 1979 * kTera, 1979 * kTera},
       {200 * kGB, kNvlinkLatency},
       {50 * kGB, kNetworkLatency}},
      // NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 2,039 GB/s, BF16 312, INT8 624 dense, no FP8,
      // NVLink 600 GB/s; DGX A100: 8x HDR 200 Gb/s.
      {"A100-80G",
       8,
       {"A100-80G", 80 * kGiB, 2.039e12, 312 * kTera, 0, 624 * kTera},
       {300 * kGB, kNvlinkLatency},
       {25 * kGB, kNetworkLatency}},
      // AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, BF16 1,307.4 / FP8 2,614.9 / INT8 2,614.9
      // dense; 8-GPU platform fully connected by Infinity Fabric, 7 peer links of 64 GB/s each direction.
      {"MI300X",
       8,
       {"MI300X", 192 * kGiB, 5.3e12, 1307.4 * kTera, 2614.9 * kTera, 2614.9 * kTera},
       {448 * kGB, kNvlinkLatency},
       {50 * kGB, kNetworkLatency}},
      // Huawei Ascend 910B-class NPU (Atlas 800 A2 node of 8): 64 GB HBM2e, ~1.6 TB/s, ~313 TFLOPS FP16
      // (2.5 PFLOPS per 8-NPU server), INT8 twice that, no FP8; HCCS 7 links x 56 GB/s = 392 GB/s in all
      // (196 GB/s a direction); 200GE RoCE per NPU. Public figures vary by SKU (910B1..B4).
      {"910B",
       8,
       {"910B", 64 * kGiB, 1.6e12, 313 * kTera, 0, 626 * kTera},
       {196 * kGB, kNvlinkLatency},
       {25 * kGB, kNetworkLatency}},
      // Generic CPU node: two AMD EPYC 9654 sockets (AMD spec: 96 cores, 2.4 GHz base, 12 channels
      // DDR5-4800 = 460.8 GB/s a socket), 768 GB (24 x 32 GB DIMMs). One device per node (NUMA ignored).
      // Zen 4 AVX-512: 32 FP32 FLOP/cycle/core -> 14.7 TFLOPS FP32; AVX512-BF16 dot 2x, VNNI INT8 4x.
      // 100 GbE between nodes.
      {"CPU",
       1,
       {"CPU", 768 * kGB, 921.6e9, 29.5 * kTera, 0, 59.0 * kTera},
       {921.6 * kGB, kSharedMemoryLatency},
       {12.5 * kGB, 20e-6},
       kDefaultSyncSkew},
  };
  return kPresets;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Reads "<digits>x" from the front of `s`; returns the number and advances.
std::optional<int64_t> take_count(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i >= s.size() || (s[i] != 'x' && s[i] != 'X') || i > 6) return std::nullopt;
  int64_t n = 0;
  std::from_chars(s.data(), s.data() + i, n);
  s.remove_prefix(i + 1);
  return n;
}

// Value of "Key:   123 kB" in /proc/meminfo, in bytes.
std::optional<double> meminfo_bytes(std::string_view meminfo, std::string_view key) {
  std::istringstream in{std::string(meminfo)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(std::string(key) + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    double value = 0;
    std::string unit;
    if (!(fields >> value)) return std::nullopt;
    fields >> unit;
    return unit == "kB" ? value * 1024.0 : value;
  }
  return std::nullopt;
}

std::string first_field(std::string_view cpuinfo, std::string_view key) {
  std::istringstream in{std::string(cpuinfo)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(std::string(key), 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(colon + 1);
  }
  return {};
}

bool has_flag(const std::string& flags, std::string_view flag) {
  std::istringstream in(flags);
  std::string f;
  while (in >> f) {
    if (f == flag) return true;
  }
  return false;
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> preset_device_names() {
  std::vector<std::string> out;
  for (const auto& p : node_presets()) out.emplace_back(p.key);
  return out;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : node_presets()) out.push_back(fmt::format("{}x{}", p.devices_per_node, p.key));
  return out;
}

Result<ClusterSpec> resolve_preset(std::string_view name) {
  if (name == "local") return detect_local_cluster();
  if (upper(name) == "CPU-NODE") return resolve_preset("1xCPU");
  std::string_view rest = name;
  auto first = take_count(rest);
  if (!first) {
    return not_found(
        fmt::format("cluster preset '{}': expected DEVICESxDEVICE or NODESxDEVICESxDEVICE "
                    "(devices: {}), 'local', or a cluster JSON file",
                    name, fmt::join(preset_device_names(), ", ")));
  }
  int64_t nodes = 1;
  int64_t per_node = *first;
  std::string_view probe = rest;
  if (auto second = take_count(probe)) {
    nodes = *first;
    per_node = *second;
    rest = probe;
  }
  const std::string key = upper(rest);
  for (const auto& p : node_presets()) {
    if (upper(p.key) != key) continue;
    ClusterSpec c;
    c.nodes = nodes;
    c.devices_per_node = per_node;
    c.device = p.device;
    c.intra_node = p.intra;
    c.inter_node = p.inter;
    c.sync_skew = p.sync_skew;
    c.name = cluster_shape_name(c);
    D0_RETURN_IF_ERROR(validate_cluster(c).with_context(fmt::format("cluster preset '{}'", name)));
    return c;
  }
  return not_found(fmt::format("cluster preset '{}': unknown device '{}' (known: {})", name, rest,
                               fmt::join(preset_device_names(), ", ")));
}

Result<ClusterSpec> resolve_cluster(const std::string& preset_or_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(preset_or_path, ec)) return load_cluster_file(preset_or_path);
  return resolve_preset(preset_or_path);
}

Result<ClusterSpec> local_cluster_from(std::string_view meminfo, std::string_view cpuinfo, int64_t n_cpus) {
  const auto total = meminfo_bytes(meminfo, "MemTotal");
  if (!total || *total <= 0) return io_error("/proc/meminfo: no MemTotal line");
  if (n_cpus < 1) return io_error("nproc: no online CPU");
  const std::string flags = first_field(cpuinfo, "flags");
  double mhz = 0;
  const std::string mhz_text = first_field(cpuinfo, "cpu MHz");
  if (!mhz_text.empty()) mhz = std::atof(mhz_text.c_str());
  if (!(mhz > 100)) mhz = 2500;  // unknown clock: a typical server base clock
  // FP32 FLOP/cycle/core: two 512-bit FMA pipes with AVX-512, two 256-bit with AVX2+FMA, else scalar SSE.
  const double fp32_per_cycle = has_flag(flags, "avx512f") ? 64 : (has_flag(flags, "fma") ? 32 : 8);
  const double fp32 = static_cast<double>(n_cpus) * mhz * 1e6 * fp32_per_cycle;
  DeviceSpec dev;
  dev.name = "local-CPU";
  dev.memory_bytes = *total;
  dev.memory_bandwidth = std::min(static_cast<double>(n_cpus) * 20e9, 460e9);
  dev.peak_flops_bf16 = has_flag(flags, "avx512_bf16") ? 2 * fp32 : fp32;
  dev.peak_flops_int8 = (has_flag(flags, "avx512_vnni") || has_flag(flags, "avx_vnni")) ? 4 * fp32 : 0;
  ClusterSpec c;
  c.nodes = 1;
  c.devices_per_node = 1;
  c.device = dev;
  c.intra_node = {dev.memory_bandwidth, kSharedMemoryLatency};
  c.sync_skew = kDefaultSyncSkew;  // measured on CPU ranks (cluster.h)
  c.inter_node = {12.5e9, 20e-6};
  c.name = "local";
  D0_RETURN_IF_ERROR(validate_cluster(c).with_context("local machine"));
  return c;
}

Result<ClusterSpec> detect_local_cluster() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return local_cluster_from(slurp("/proc/meminfo"), slurp("/proc/cpuinfo"), n);
}

}  // namespace day0::plan
