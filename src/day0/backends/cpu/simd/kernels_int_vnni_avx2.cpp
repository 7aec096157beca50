// The INT8 / INT4 row dots with AVX-VNNI (vpdpbusd on 256-bit VEX encodings): compiled with the avx2
// flags plus avxvnni for this file only, and called only where the CPU has it (cpu_has_avx_vnni()).
#pragma GCC target("avxvnni")
#include <immintrin.h>

#include "day0/backends/cpu/simd/int_dot.h"
#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {
namespace {

struct AvxVnniDot {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
};

}  // namespace

void dot_rows_int_avx_vnni(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                           float* y) {
  int_dot_rows<AvxVnniDot>(w, n0, n1, xq, xs, y);
}

}  // namespace day0::cpu
