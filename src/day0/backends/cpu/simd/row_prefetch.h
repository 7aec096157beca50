#pragma once
// Software prefetch for the row dots of every ISA file (internal linkage, as weight_rows.h: each file
// compiles its own copy with its own flags).
#include <immintrin.h>

#include <cstdint>

#include "day0/backends/cpu/simd_level.h"

namespace day0::cpu {
namespace {  // NOLINT(cert-dcl59-cpp, google-build-namespaces): see weight_rows.h

// Decode streams weight rows from memory one after another. On some CPUs the hardware prefetchers
// alone leave the loads waiting on DRAM latency (the Xeons measured), on others software prefetch only
// gets in their way (Zen 4), so the distance is the CPU's (software_prefetch_bytes()): where
// kPrefetchBytes is not 0, each loop step of the row dots prefetches the line that far past the one it
// reads (past a row's end that is the next row, or the next chunk's: harmless either way).
[[maybe_unused]] const int64_t kPrefetchBytes = software_prefetch_bytes();
[[maybe_unused]] inline void prefetch_ahead(const void* p) {
  if (kPrefetchBytes != 0) _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}
// Row dots that do more work per weight byte (several float32 x at once, or weights to decode: FP8
// blocks, MXFP4, INT4 nibbles) issue their loads more slowly than the out-of-order window needs to keep
// enough lines in flight, so they prefetch 2 KiB ahead on every CPU, Zen 4 included: there it raises
// both the bytes per second of the decoding row dots and the FLOP/s of several float32 x against BF16
// rows. The vdpbf16ps row dots (bf16x_row) issue fast enough and take the CPU's distance instead.
inline constexpr int64_t kBusyPrefetchBytes = 2048;
[[maybe_unused]] inline void prefetch_ahead_busy(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kBusyPrefetchBytes, _MM_HINT_T0);
}
// The prefetch distance of a row dot against NT x (0: none).
template <int NT>
int64_t row_prefetch_bytes() {
  return NT > 1 ? kBusyPrefetchBytes : kPrefetchBytes;
}

}  // namespace
}  // namespace day0::cpu
