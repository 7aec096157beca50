#include <gtest/gtest.h>

#include <string>

#include "day0/plan/cluster.h"
#include "day0/plan/presets.h"

namespace day0::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const char* kGoodCluster = R"({
  "name": "lab",
  "nodes": 2,
  "devices_per_node": 4,
  "device": {"name": "X1", "memory_gb": 96, "memory_bandwidth_gb_s": 4000,
             "peak_tflops": {"bf16": 500, "fp8": 1000}},
  "intra_node": {"bandwidth_gb_s": 300, "latency_us": 2},
  "inter_node": {"bandwidth_gb_s": 25, "latency_us": 8}
})";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(Presets, EveryPresetResolvesAndValidates) {
  const auto names = preset_names();
  ASSERT_EQ(names.size(), 8u);
  for (const auto& name : names) {
    auto c = resolve_preset(name);
    ASSERT_TRUE(c.is_ok()) << name << ": " << c.status().to_string();
    EXPECT_TRUE(validate_cluster(*c).is_ok()) << name;
    EXPECT_EQ(c->name, name);
  }
}

TEST(Presets, SpecSheetNumbers) {
  auto h200 = resolve_preset("8xH200");
  ASSERT_TRUE(h200.is_ok());
  EXPECT_EQ(h200->total_devices(), 8);
  EXPECT_DOUBLE_EQ(h200->device.memory_bytes, 141 * kGiB);
  EXPECT_DOUBLE_EQ(h200->device.memory_bandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200->device.peak_flops_fp8, 2 * h200->device.peak_flops_bf16 + 1e12);  // 1,979 vs 989
  auto a100 = resolve_preset("8xA100-80G");
  ASSERT_TRUE(a100.is_ok());
  EXPECT_EQ(a100->device.peak_flops_fp8, 0);  // Ampere has no FP8 tensor cores
  auto h800 = resolve_preset("8xH800");
  auto h100 = resolve_preset("8xH100");
  ASSERT_TRUE(h800.is_ok() && h100.is_ok());
  EXPECT_LT(h800->intra_node.bandwidth, h100->intra_node.bandwidth);  // the export variant's NVLink
  EXPECT_EQ(h800->device.memory_bytes, h100->device.memory_bytes);
  // B200 (DGX / HGX B200 datasheets): 180 GB, 8 TB/s, dense BF16 2.25 PFLOPS and FP8 twice that, NVLink 5 at
  // twice the H200's.
  auto b200 = resolve_preset("8xB200");
  ASSERT_TRUE(b200.is_ok());
  EXPECT_DOUBLE_EQ(b200->device.memory_bytes, 180 * kGiB);
  EXPECT_DOUBLE_EQ(b200->device.memory_bandwidth, 8e12);
  EXPECT_DOUBLE_EQ(b200->device.peak_flops_bf16, 2.25e15);
  EXPECT_DOUBLE_EQ(b200->device.peak_flops_fp8, 2 * b200->device.peak_flops_bf16);
  EXPECT_DOUBLE_EQ(b200->intra_node.bandwidth, 2 * h200->intra_node.bandwidth);
}

TEST(Presets, NodesMultiplyAndNamesAreCaseInsensitive) {
  auto c = resolve_preset("2x8xH200");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->nodes, 2);
  EXPECT_EQ(c->devices_per_node, 8);
  EXPECT_EQ(c->total_devices(), 16);
  EXPECT_EQ(c->name, "2x8xH200");
  auto mi = resolve_preset("4x8xmi300x");
  ASSERT_TRUE(mi.is_ok()) << mi.status().to_string();
  EXPECT_EQ(mi->device.name, "MI300X");
  EXPECT_EQ(mi->total_devices(), 32);
  auto cpu = resolve_preset("cpu-node");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->total_devices(), 1);
  EXPECT_EQ(with_nodes(*c, 3).name, "3x8xH200");
  EXPECT_EQ(with_nodes(*c, 1).name, "8xH200");
}

TEST(Presets, UnknownNamesAreNotFound) {
  for (const char* bad : {"8xB300", "H200", "x8xH200", "0x8xH200", "8x", ""}) {
    auto c = resolve_preset(bad);
    EXPECT_FALSE(c.is_ok()) << bad;
  }
  auto c = resolve_preset("8xB300");
  EXPECT_NE(c.status().message().find("unknown device 'B300'"), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find("H200"), std::string::npos);
}

TEST(ClusterJson, ParsesEveryField) {
  auto c = parse_cluster_json(kGoodCluster, "lab.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->name, "lab");
  EXPECT_EQ(c->total_devices(), 8);
  EXPECT_DOUBLE_EQ(c->device.memory_bytes, 96e9);
  EXPECT_DOUBLE_EQ(c->device.peak_flops_fp8, 1000e12);
  EXPECT_EQ(c->device.peak_flops_int8, 0);  // optional
  EXPECT_DOUBLE_EQ(c->inter_node.bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c->intra_node.latency, 2e-6);
  auto gib = parse_cluster_json(replace(kGoodCluster, "\"memory_gb\": 96", "\"memory_gib\": 96"), "lab.json");
  ASSERT_TRUE(gib.is_ok());
  EXPECT_DOUBLE_EQ(gib->device.memory_bytes, 96 * kGiB);
}

TEST(ClusterJson, MissingFieldsNameTheKeyPath) {
  struct Case {
    std::string from, to, expect;
  };
  const Case cases[] = {
      {"\"memory_bandwidth_gb_s\": 4000,", "", "device.memory_bandwidth_gb_s: missing"},
      {"\"nodes\": 2,", "", "nodes: missing"},
      {"\"bf16\": 500, ", "", "device.peak_tflops.bf16: missing"},
      {"\"latency_us\": 8", "\"latency\": 8", "inter_node.latency_us: missing"},
      {"\"memory_gb\": 96,", "", "device.memory_gb: missing"},
  };
  for (const auto& k : cases) {
    auto c = parse_cluster_json(replace(kGoodCluster, k.from, k.to), "lab.json");
    ASSERT_FALSE(c.is_ok()) << k.expect;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(k.expect), std::string::npos) << c.status().to_string();
    EXPECT_NE(c.status().message().find("lab.json"), std::string::npos);
  }
}

TEST(ClusterJson, NegativeZeroAndNonIntegerFieldsAreRejected) {
  const std::pair<std::string, std::string> cases[] = {
      {"\"memory_gb\": 96", "\"memory_gb\": -96"},
      {"\"bandwidth_gb_s\": 300", "\"bandwidth_gb_s\": 0"},
      {"\"nodes\": 2", "\"nodes\": 0"},
      {"\"devices_per_node\": 4", "\"devices_per_node\": 2.5"},
      {"\"fp8\": 1000", "\"fp8\": -1"},
      {"\"memory_bandwidth_gb_s\": 4000", "\"memory_bandwidth_gb_s\": \"fast\""},
      // Names of the wrong type threw json::type_error (exit 3; found by the cluster fuzz target).
      {"\"name\": \"X1\"", "\"name\": 300"},
      {"\"name\": \"lab\"", "\"name\": [1]"},
  };
  for (const auto& [from, to] : cases) {
    auto c = parse_cluster_json(replace(kGoodCluster, from, to), "lab.json");
    EXPECT_FALSE(c.is_ok()) << to;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
  }
  auto broken = parse_cluster_json("{\"nodes\": ", "lab.json");
  EXPECT_EQ(broken.status().code(), StatusCode::kParseError);
  auto missing = load_cluster_file("/nonexistent/cluster.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ClusterJson, SyncSkewIsOptionalAndBounded) {
  auto absent = parse_cluster_json(kGoodCluster, "lab.json");
  ASSERT_TRUE(absent.is_ok());
  EXPECT_EQ(absent->sync_skew, kDefaultSyncSkew);
  const std::string with = replace(kGoodCluster, "\"nodes\": 2,", "\"nodes\": 2, \"sync_skew\": 0.03,");
  auto given = parse_cluster_json(with, "lab.json");
  ASSERT_TRUE(given.is_ok()) << given.status().to_string();
  EXPECT_DOUBLE_EQ(given->sync_skew, 0.03);
  EXPECT_TRUE(parse_cluster_json(replace(with, "0.03", "0"), "lab.json").is_ok());
  for (const char* bad : {"-0.1", "1.5", "\"small\""}) {
    auto c = parse_cluster_json(replace(with, "0.03", bad), "lab.json");
    ASSERT_FALSE(c.is_ok()) << bad;
    EXPECT_NE(c.status().message().find("sync_skew"), std::string::npos) << c.status().to_string();
  }
}

TEST(LocalCluster, SharedMemoryLatencyIsTheMeasuredOne) {
  // 0.76 us measured for a two-rank all-reduce over shared memory, two messages of the ring model.
  auto c = local_cluster_from("MemTotal: 1000 kB\n", "flags\t\t: fma\n", 2);
  ASSERT_TRUE(c.is_ok());
  EXPECT_DOUBLE_EQ(c->intra_node.latency, 0.38e-6);
  EXPECT_EQ(c->sync_skew, kDefaultSyncSkew);
}

TEST(LocalCluster, ReadsMeminfoAndCpuFlags) {
  const char* meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n";
  const char* avx512 =
      "processor\t: 0\ncpu MHz\t\t: 3000.000\nflags\t\t: fpu sse fma avx2 avx512f avx512_bf16 avx512_vnni\n";
  const char* avx2 = "processor\t: 0\ncpu MHz\t\t: 3000.000\nflags\t\t: fpu sse fma avx2\n";
  auto wide = local_cluster_from(meminfo, avx512, 4);
  auto narrow = local_cluster_from(meminfo, avx2, 4);
  ASSERT_TRUE(wide.is_ok() && narrow.is_ok());
  EXPECT_DOUBLE_EQ(wide->device.memory_bytes, 16384000.0 * 1024);
  EXPECT_EQ(wide->total_devices(), 1);
  // 4 cores x 3 GHz x 64 FP32 FLOP/cycle, doubled by the BF16 dot product.
  EXPECT_DOUBLE_EQ(wide->device.peak_flops_bf16, 2 * 4 * 3e9 * 64);
  EXPECT_DOUBLE_EQ(narrow->device.peak_flops_bf16, 4 * 3e9 * 32);
  EXPECT_GT(wide->device.peak_flops_int8, 0);
  EXPECT_EQ(narrow->device.peak_flops_int8, 0);
  EXPECT_FALSE(local_cluster_from("MemFree: 1 kB\n", avx2, 4).is_ok());
  EXPECT_FALSE(local_cluster_from(meminfo, avx2, 0).is_ok());
}

TEST(LocalCluster, DetectsThisMachine) {
  auto c = resolve_preset("local");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_GT(c->device.memory_bytes, 0);
  EXPECT_GT(c->device.peak_flops_bf16, 0);
}

}  // namespace
}  // namespace day0::plan
