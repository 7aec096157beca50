// libFuzzer target: cluster description files (plan --cluster FILE).
#include <cstdint>
#include <string_view>

#include "day0/plan/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cluster = day0::plan::parse_cluster_json(text, "fuzz/cluster.json");
  if (cluster.is_ok() && cluster->total_devices() <= 0) __builtin_trap();  // validated clusters have devices
  return 0;
}
