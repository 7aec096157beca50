#pragma once
// What this machine is, for the report header and the "this machine" plan: CPU model, cores,
// memory, SIMD level. Read from /proc; fields that cannot be read are left out, never guessed.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace day0::report {

struct MachineInfo {
  std::string cpu_model;
  int logical_cores = 0;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_available_bytes = 0;
  std::string simd_level;  // what the cpu backend dispatches to
  bool avx512_bf16 = false;
};

MachineInfo read_machine_info();
nlohmann::json to_json(const MachineInfo& info);

// Resident set size of this process in bytes (/proc/self/statm), 0 if unreadable.
uint64_t current_rss_bytes();

}  // namespace day0::report
