#pragma once
// Helpers for the op tests: random weights in every format, guarded output buffers, NMSE, and the
// list of backends (every SIMD level of cpu, and partial behind the fallback resolver).
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "day0/backends/backend.h"

namespace day0::test {

// A weight matrix with owned storage in one format.
struct TestWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  std::vector<float> zeros;                           // INT8 / INT4 zero points [rows, groups], or empty
  int64_t group = 0;                                  // INT8 / INT4 columns per scale
  Fp4ScaleCode fp4_scale_code = Fp4ScaleCode::kE8M0;  // FP4: E8M0 or NVFP4's E4M3 scale bytes
  float fp4_global_scale = 1.0f;                      // NVFP4's per-tensor multiplier
  ScaleType int_scale_type = ScaleType::kF32;         // INT8 / INT4: how `scales` holds them
  WeightView view() const;
};

// INT8 and INT4 use group 32 where cols is a multiple of 32 (else one group per row); INT8 is
// symmetric, INT4 asymmetric (random zero points), so the generic cases cover both kinds.
TestWeight random_weight(WeightFormat format, int64_t rows, int64_t cols, uint64_t seed,
                         float amplitude = 1.0f);
// INT8 / INT4 with every knob: random codes over the whole range (INT8 includes -128), per-group
// scales around amplitude / code range, random zero points when asymmetric.
TestWeight random_int_weight(WeightFormat format, int64_t rows, int64_t cols, int64_t group, bool asymmetric,
                             uint64_t seed, float amplitude = 1.0f);
bool format_fits(WeightFormat format, int64_t cols);  // MXFP4 needs cols % 32 == 0

std::vector<float> random_vector(int64_t n, uint64_t seed, float amplitude = 1.0f);

// A float matrix [rows, cols] stored with 3 guard floats after every row and 16 before and after the
// whole block, all set to a sentinel; guards_intact() says whether a kernel wrote outside the view.
class GuardedMatrix {
 public:
  GuardedMatrix(int64_t rows, int64_t cols, float fill = 0.0f);
  Matrix view() { return {storage_.data() + kGuard, rows_, cols_, cols_ + kPad}; }
  ConstMatrix cview() const { return {storage_.data() + kGuard, rows_, cols_, cols_ + kPad}; }
  bool guards_intact() const;
  std::vector<float> values() const;  // row-major, without the guards
  void fill_random(uint64_t seed, float amplitude = 1.0f);

 private:
  static constexpr int64_t kGuard = 16;
  static constexpr int64_t kPad = 3;
  int64_t rows_;
  int64_t cols_;
  std::vector<float> storage_;
};

// Normalised mean squared error sum (a-b)^2 / sum b^2 (b the reference); +inf on NaN or size mismatch.
double nmse(const std::vector<float>& a, const std::vector<float>& b);

struct NamedBackend {
  std::string label;  // "cpu/avx2", "partial", ...
  std::unique_ptr<Backend> backend;
};
// reference excluded: every cpu SIMD level available here (2 threads, to exercise the pool) and the
// partial backend behind the resolver (quiet).
std::vector<NamedBackend> backends_under_test();
std::unique_ptr<Backend> reference_backend();

// Accumulates cases and prints an aligned table of the failures.
class CaseTable {
 public:
  void add(const std::string& op, const std::string& backend, const std::string& shape, double error,
           double tolerance, bool guards_ok);
  int failures() const { return failures_; }
  int cases() const { return cases_; }
  std::string failure_table() const;

 private:
  struct Row {
    std::string op, backend, shape;
    double error, tolerance;
    bool guards_ok;
  };
  std::vector<Row> failed_;
  int failures_ = 0;
  int cases_ = 0;
};

}  // namespace day0::test
