#include "day0/plan/cluster.h"

#include "day0/core/json_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace day0::plan {

namespace {

constexpr int64_t kMaxNodes = 1 << 16;
constexpr int64_t kMaxDevicesPerNode = 1024;

using nlohmann::json;

Status positive(double value, const std::string& what, bool zero_ok = false) {
  if (!std::isfinite(value) || value < 0 || (!zero_ok && value == 0)) {
    return invalid_argument(fmt::format("{}: expected a {} number, found {}", what,
                                        zero_ok ? "non-negative" : "positive", value));
  }
  return Status::ok();
}

// Reads a required number at `object[key]`; `path` is the key path for messages.
Result<double> number_at(const json& object, const char* key, const std::string& path) {
  const std::string where = path.empty() ? key : path + "." + key;
  if (!object.is_object() || !object.contains(key)) return invalid_argument(where + ": missing");
  const json& v = object.at(key);
  if (!v.is_number())
    return invalid_argument(fmt::format("{}: expected a number, found {}", where, json_excerpt(v)));
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0)
    return invalid_argument(fmt::format("{}: must not be negative, found {}", where, d));
  return d;
}

Result<double> optional_number_at(const json& object, const char* key, const std::string& path) {
  if (!object.is_object() || !object.contains(key)) return 0.0;
  return number_at(object, key, path);
}

Result<int64_t> count_at(const json& object, const char* key, int64_t max) {
  D0_ASSIGN_OR_RETURN(double d, number_at(object, key, ""));
  if (d < 1 || d > static_cast<double>(max) || std::floor(d) != d) {
    return invalid_argument(fmt::format("{}: expected an integer in [1, {}], found {}", key, max, d));
  }
  return static_cast<int64_t>(d);
}

Result<LinkSpec> link_at(const json& root, const char* key) {
  if (!root.contains(key) || !root.at(key).is_object()) {
    return invalid_argument(fmt::format("{}: missing (an object with bandwidth_gb_s and latency_us)", key));
  }
  const json& link = root.at(key);
  LinkSpec out;
  D0_ASSIGN_OR_RETURN(double gbs, number_at(link, "bandwidth_gb_s", key));
  D0_ASSIGN_OR_RETURN(double us, number_at(link, "latency_us", key));
  out.bandwidth = gbs * 1e9;
  out.latency = us * 1e-6;
  return out;
}

// An optional string field (json::value would throw on a number: found by the cluster fuzz target).
Result<std::string> name_at(const json& obj, const char* key, const char* fallback,
                            const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) {
    return invalid_argument(fmt::format("{}{}: expected a string, found {}", where, key, json_excerpt(*it)));
  }
  return it->get<std::string>();
}

Result<DeviceSpec> device_at(const json& root) {
  if (!root.contains("device") || !root.at("device").is_object()) {
    return invalid_argument("device: missing (an object with memory, bandwidth and peak FLOP/s)");
  }
  const json& dev = root.at("device");
  DeviceSpec out;
  D0_ASSIGN_OR_RETURN(out.name, name_at(dev, "name", "device", "device."));
  if (dev.contains("memory_gib")) {
    D0_ASSIGN_OR_RETURN(double gib, number_at(dev, "memory_gib", "device"));
    out.memory_bytes = gib * 1024.0 * 1024.0 * 1024.0;
  } else if (dev.contains("memory_gb")) {
    D0_ASSIGN_OR_RETURN(double gb, number_at(dev, "memory_gb", "device"));
    out.memory_bytes = gb * 1e9;
  } else {
    return invalid_argument("device.memory_gb: missing (or give device.memory_gib)");
  }
  D0_ASSIGN_OR_RETURN(double bw, number_at(dev, "memory_bandwidth_gb_s", "device"));
  out.memory_bandwidth = bw * 1e9;
  if (!dev.contains("peak_tflops") || !dev.at("peak_tflops").is_object()) {
    return invalid_argument("device.peak_tflops: missing (an object with bf16 and optional fp8, int8)");
  }
  const json& peak = dev.at("peak_tflops");
  D0_ASSIGN_OR_RETURN(double bf16, number_at(peak, "bf16", "device.peak_tflops"));
  D0_ASSIGN_OR_RETURN(double fp8, optional_number_at(peak, "fp8", "device.peak_tflops"));
  D0_ASSIGN_OR_RETURN(double int8, optional_number_at(peak, "int8", "device.peak_tflops"));
  out.peak_flops_bf16 = bf16 * 1e12;
  out.peak_flops_fp8 = fp8 * 1e12;
  out.peak_flops_int8 = int8 * 1e12;
  return out;
}

}  // namespace

Status validate_cluster(const ClusterSpec& c) {
  if (c.nodes < 1 || c.nodes > kMaxNodes) {
    return invalid_argument(fmt::format("nodes: expected 1..{}, found {}", kMaxNodes, c.nodes));
  }
  if (c.devices_per_node < 1 || c.devices_per_node > kMaxDevicesPerNode) {
    return invalid_argument(
        fmt::format("devices_per_node: expected 1..{}, found {}", kMaxDevicesPerNode, c.devices_per_node));
  }
  D0_RETURN_IF_ERROR(positive(c.device.memory_bytes, "device memory"));
  D0_RETURN_IF_ERROR(positive(c.device.memory_bandwidth, "device memory bandwidth"));
  D0_RETURN_IF_ERROR(positive(c.device.peak_flops_bf16, "device peak bf16 FLOP/s"));
  D0_RETURN_IF_ERROR(positive(c.device.peak_flops_fp8, "device peak fp8 FLOP/s", true));
  D0_RETURN_IF_ERROR(positive(c.device.peak_flops_int8, "device peak int8 OP/s", true));
  D0_RETURN_IF_ERROR(positive(c.intra_node.bandwidth, "intra_node bandwidth"));
  D0_RETURN_IF_ERROR(positive(c.intra_node.latency, "intra_node latency", true));
  D0_RETURN_IF_ERROR(positive(c.inter_node.bandwidth, "inter_node bandwidth"));
  D0_RETURN_IF_ERROR(positive(c.inter_node.latency, "inter_node latency", true));
  D0_RETURN_IF_ERROR(positive(c.sync_skew, "sync_skew", true));
  if (c.sync_skew > 1)
    return invalid_argument(fmt::format("sync_skew: expected at most 1, found {}", c.sync_skew));
  return Status::ok();
}

Result<ClusterSpec> parse_cluster_json(std::string_view text, const std::string& origin) {
  D0_ASSIGN_OR_RETURN(json root, parse_json_text(text, origin, JsonLimits{size_t{1} << 20, 16}));
  if (!root.is_object()) return parse_error(origin + ": expected a JSON object at the top level");
  auto parse = [&]() -> Result<ClusterSpec> {
    ClusterSpec out;
    D0_ASSIGN_OR_RETURN(out.name, name_at(root, "name", "cluster", ""));
    D0_ASSIGN_OR_RETURN(out.nodes, count_at(root, "nodes", kMaxNodes));
    D0_ASSIGN_OR_RETURN(out.devices_per_node, count_at(root, "devices_per_node", kMaxDevicesPerNode));
    D0_ASSIGN_OR_RETURN(out.device, device_at(root));
    D0_ASSIGN_OR_RETURN(out.intra_node, link_at(root, "intra_node"));
    D0_ASSIGN_OR_RETURN(out.inter_node, link_at(root, "inter_node"));
    if (root.contains("sync_skew")) {
      D0_ASSIGN_OR_RETURN(out.sync_skew, number_at(root, "sync_skew", ""));
    }
    D0_RETURN_IF_ERROR(validate_cluster(out));
    return out;
  };
  Result<ClusterSpec> parsed = parse();
  if (!parsed) return parsed.status().with_context(origin);
  return parsed;
}

Result<ClusterSpec> load_cluster_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open cluster file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_cluster_json(ss.str(), path);
}

ClusterSpec with_nodes(const ClusterSpec& cluster, int64_t nodes) {
  ClusterSpec out = cluster;
  out.nodes = nodes;
  out.name = cluster_shape_name(out);
  return out;
}

std::string cluster_shape_name(const ClusterSpec& c) {
  if (c.nodes == 1) return fmt::format("{}x{}", c.devices_per_node, c.device.name);
  return fmt::format("{}x{}x{}", c.nodes, c.devices_per_node, c.device.name);
}

}  // namespace day0::plan
