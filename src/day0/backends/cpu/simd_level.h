#pragma once
// Run-time SIMD dispatch levels of the cpu backend. Kernels are compiled per ISA (files named
// *_avx512.cpp / *_avx2.cpp get the ISA flags) and chosen when a cpu backend is created, so one
// binary runs everywhere and tests can force every level available on the machine.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "day0/core/status.h"

namespace day0 {

// Ordered: a higher level implies the lower ones.
//   kAvx2:   AVX2 + FMA + F16C.
//   kAvx512: AVX-512 F/BW/VL/DQ (+ BF16 / VNNI kernels where the CPU has them).
//   kAmx:    kAvx512 with AVX-512 BF16 and AMX tiles (AMX-TILE + AMX-BF16, Sapphire Rapids and later),
//            the OS having granted this process the tile state: the BF16 GEMM runs on the tiles.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const char* simd_level_name(SimdLevel level);  // "scalar", "avx2", "avx512", "amx"
std::optional<SimdLevel> parse_simd_level(std::string_view name);

// What this CPU can run (__builtin_cpu_supports).
SimdLevel detected_simd_level();
bool cpu_has_avx512_bf16();
// The integer dot-product instructions the INT8 / INT4 kernels use where present: AVX-VNNI (vpdpbusd
// on 256-bit VEX, Alder Lake / Sapphire Rapids) at the avx2 level, AVX-512 VNNI at the avx512 level.
bool cpu_has_avx_vnni();
bool cpu_has_avx512_vnni();
// AMX-TILE + AMX-BF16 + AVX-512 BF16 in the CPU, tile state enabled by the OS (XCR0) and granted to this
// process (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool cpu_has_amx_bf16();
// AMX-INT8 (CPUID leaf 7 EDX bit 25: TDPBSSD / TDPBUSD) on top of cpu_has_amx_bf16(): the INT8 / INT4
// prefill tiles of the amx level.
bool cpu_has_amx_int8();
// How far ahead (bytes) the AVX-512 row dots of decode prefetch the weights they stream (float, BF16,
// F16, INT8; the dequantizing FP8 / MXFP4 / INT4 ones always prefetch 2 KiB on); 0: not at all. Env
// DAY0_PREFETCH_BYTES (0 to 65536) if set to a valid number, else 0 on AMD (Zen 4's hardware prefetchers
// stream weights in 2 MiB pages faster alone: software prefetch there cost a GEMV bandwidth and dense
// decode speed) and 2048 elsewhere (on the Xeons measured, the hardware prefetchers alone left decode
// waiting on DRAM latency). Read once.
int64_t software_prefetch_bytes();
// The rule software_prefetch_bytes() applies, for a DAY0_PREFETCH_BYTES value (nullptr: unset; a value
// that is not a whole number in range is ignored) and a CPUID vendor string.
int64_t software_prefetch_bytes_for(const char* env, std::string_view vendor);
// Every level <= detected_simd_level(), lowest first (what tests iterate over).
std::vector<SimdLevel> available_simd_levels();

// The level a cpu backend uses when not told: env DAY0_SIMD (scalar|avx2|avx512|amx) if set, else the
// detected level. InvalidArgument when DAY0_SIMD is unknown or above what the CPU supports.
Result<SimdLevel> default_simd_level();

}  // namespace day0
