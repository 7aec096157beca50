#include "day0/backends/cpu/simd_level.h"

#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

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
    case SimdLevel::kAmx:
      return "amx";
  }
  return "?";
}

std::optional<SimdLevel> parse_simd_level(std::string_view name) {
  if (name == "scalar") return SimdLevel::kScalar;
  if (name == "avx2") return SimdLevel::kAvx2;
  if (name == "avx512") return SimdLevel::kAvx512;
  if (name == "amx") return SimdLevel::kAmx;
  return std::nullopt;
}

namespace {

// AMX needs three things: the CPU's feature bits (CPUID leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16), the
// OS saving the tile state (XCR0 bits 17 and 18), and, on Linux, this process asking for the tile data
// state once; a tile instruction without that permission faults.
bool amx_usable() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool tile = (edx >> 24) & 1u, bf16 = (edx >> 22) & 1u;
  if (!tile || !bf16) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || ((ecx >> 27) & 1u) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x60000u) != 0x60000u) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool avx512_base() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

}  // namespace

bool cpu_has_amx_bf16() {
  static const bool usable = avx512_base() && __builtin_cpu_supports("avx512bf16") && amx_usable();
  return usable;
}

bool cpu_has_amx_int8() {
  static const bool usable = [] {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return cpu_has_amx_bf16() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 &&
           ((edx >> 25) & 1u) != 0;
#else
    return false;
#endif
  }();
  return usable;
}

SimdLevel detected_simd_level() {
  __builtin_cpu_init();
  if (cpu_has_amx_bf16()) return SimdLevel::kAmx;
  if (avx512_base()) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return SimdLevel::kAvx2;
  }
  return SimdLevel::kScalar;
}

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return detected_simd_level() >= SimdLevel::kAvx512 && __builtin_cpu_supports("avx512bf16");
}

bool cpu_has_avx_vnni() {
  __builtin_cpu_init();
  return detected_simd_level() >= SimdLevel::kAvx2 && __builtin_cpu_supports("avxvnni") != 0;
}

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return detected_simd_level() >= SimdLevel::kAvx512 && __builtin_cpu_supports("avx512vnni") != 0;
}

std::vector<SimdLevel> available_simd_levels() {
  std::vector<SimdLevel> out;
  const SimdLevel top = detected_simd_level();
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAmx}) {
    if (static_cast<int>(level) <= static_cast<int>(top)) out.push_back(level);
  }
  return out;
}

Result<SimdLevel> default_simd_level() {
  const char* env = std::getenv("DAY0_SIMD");
  if (env == nullptr || *env == '\0') return detected_simd_level();
  const auto level = parse_simd_level(env);
  if (!level) {
    return invalid_argument(fmt::format("DAY0_SIMD: expected scalar, avx2, avx512 or amx, found '{}'", env));
  }
  if (static_cast<int>(*level) > static_cast<int>(detected_simd_level())) {
    return invalid_argument(fmt::format("DAY0_SIMD={}: this CPU supports at most {}", env,
                                        simd_level_name(detected_simd_level())));
  }
  return *level;
}

int64_t software_prefetch_bytes_for(const char* env, std::string_view vendor) {
  if (env != nullptr && *env >= '0' && *env <= '9') {  // strtoll would skip spaces and take signs
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(env, &end, 10);
    if (errno == 0 && *end == '\0' && v >= 0 && v <= 65536) return static_cast<int64_t>(v);
  }
  return vendor == "AuthenticAMD" ? 0 : 2048;
}

int64_t software_prefetch_bytes() {
  static const int64_t bytes = [] {
    unsigned eax = 0, vendor[3] = {0, 0, 0};
    char name[13] = {};
    if (__get_cpuid(0, &eax, &vendor[0], &vendor[2], &vendor[1]) != 0) std::memcpy(name, vendor, 12);
    return software_prefetch_bytes_for(std::getenv("DAY0_PREFETCH_BYTES"), name);
  }();
  return bytes;
}

}  // namespace day0
