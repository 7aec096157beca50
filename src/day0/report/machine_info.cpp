#include "day0/report/machine_info.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "day0/backends/cpu/simd_level.h"

namespace day0::report {

namespace {
uint64_t meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      uint64_t kib = 0;
      fields >> kib;
      return kib;
    }
  }
  return 0;
}
}  // namespace

MachineInfo read_machine_info() {
  MachineInfo info;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) info.cpu_model = line.substr(colon + 2);
      break;
    }
  }
  info.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  info.memory_total_bytes = meminfo_kib("MemTotal") * 1024;
  info.memory_available_bytes = meminfo_kib("MemAvailable") * 1024;
  info.simd_level = simd_level_name(detected_simd_level());
  info.avx512_bf16 = cpu_has_avx512_bf16();
  return info;
}

nlohmann::json to_json(const MachineInfo& info) {
  return {{"cpu_model", info.cpu_model},
          {"logical_cores", info.logical_cores},
          {"memory_total_bytes", info.memory_total_bytes},
          {"memory_available_bytes", info.memory_available_bytes},
          {"simd_level", info.simd_level},
          {"avx512_bf16", info.avx512_bf16}};
}

uint64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace day0::report
