#pragma once
// The weight value scan of `verify --values` (and adapt's weights stage): NaN, Inf and absurd
// magnitudes per tensor, fed with the bytes the hashing pass reads anyway (no extra read).
// Floating formats only (F64, F32, F16, BF16, F8 E4M3 / E5M2, and E8M0 scale exponents, whose 0xFF is
// NaN); integer and packed formats are skipped (FP4 E2M1 nibbles have no NaN or Inf codes).
// Thread safety: one scanner per shard, fed by one thread in file order.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/io/safetensors_header.h"

namespace day0 {

// A weight this large is corruption (a flipped exponent bit), not a trained value.
inline constexpr double kAbsurdWeightMagnitude = 1e6;

struct TensorValueStats {
  std::string name;
  DType dtype = DType::kF32;
  uint64_t n_values = 0;  // values seen (fewer than numel when the file is truncated)
  uint64_t n_nan = 0;
  uint64_t n_inf = 0;
  uint64_t first_bad = UINT64_MAX;  // index of the first NaN / Inf
  double max_abs = 0;               // of the finite values
  bool bad() const { return n_nan > 0 || n_inf > 0 || max_abs > kAbsurdWeightMagnitude; }
};

bool value_scan_supports(DType dtype);

class ShardValueScanner {
 public:
  explicit ShardValueScanner(const SafetensorsHeader& header);
  // The next bytes of the file, starting at file offset `offset` (calls come in file order).
  void consume(uint64_t offset, std::span<const uint8_t> bytes);
  // Per scanned tensor, in file order (max_abs is final once the whole file was fed).
  std::vector<TensorValueStats> stats() const;

 private:
  struct Tracked {
    TensorValueStats stats;
    uint64_t file_begin = 0, file_end = 0;
    uint32_t max_bits = 0;  // largest magnitude bit pattern (monotonic in |x| within a format)
  };
  void feed(Tracked& t, const uint8_t* p, size_t n);
  void decode(Tracked& t, const uint8_t* p, size_t n_elements);
  std::vector<Tracked> tensors_;
  size_t current_ = 0;
  uint8_t carry_[8] = {};
  size_t carry_n_ = 0;
};

}  // namespace day0
