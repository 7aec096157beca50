#include "day0/backends/cpu/simd_level.h"

#include <cstdlib>

#include <fmt/format.h>

namespace day0 {

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<SimdLevel> parse_simd_level(std::string_view name) {
  if (name == "scalar") return SimdLevel::kScalar;
  if (name == "avx2") return SimdLevel::kAvx2;
  if (name == "avx512") return SimdLevel::kAvx512;
  return std::nullopt;
}

SimdLevel detected_simd_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return SimdLevel::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return SimdLevel::kAvx2;
  }
  return SimdLevel::kScalar;
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return detected_simd_level() == SimdLevel::kAvx512 && __builtin_cpu_supports("avx512bf16");
}

bool cpu_has_avx_vnni() {
  __builtin_cpu_init();
  return detected_simd_level() >= SimdLevel::kAvx2 && __builtin_cpu_supports("avxvnni") != 0;
}

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return detected_simd_level() == SimdLevel::kAvx512 && __builtin_cpu_supports("avx512vnni") != 0;
}

std::vector<SimdLevel> available_simd_levels() {
  std::vector<SimdLevel> out;
  const SimdLevel top = detected_simd_level();
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (static_cast<int>(level) <= static_cast<int>(top)) out.push_back(level);
  }
  return out;
}

Result<SimdLevel> default_simd_level() {
  const char* env = std::getenv("DAY0_SIMD");
  if (env == nullptr || *env == '\0') return detected_simd_level();
  const auto level = parse_simd_level(env);
  if (!level) {
    return invalid_argument(fmt::format("DAY0_SIMD: expected scalar, avx2 or avx512, found '{}'", env));
  }
  if (static_cast<int>(*level) > static_cast<int>(detected_simd_level())) {
    return invalid_argument(fmt::format("DAY0_SIMD={}: this CPU supports at most {}", env,
                                        simd_level_name(detected_simd_level())));
  }
  return *level;
}

}  // namespace day0
