#pragma once
// test-backend-ops style harness: run one named case on the reference backend and on every backend
// under test, compare with NMSE, check guard bytes, and collect failures into a printed table.
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "op_test_support.h"

namespace day0::test {

// Tolerances (NMSE against the double-accumulating reference). Weights are dequantised exactly by
// every backend, so all formats share them; the float32 accumulation order is what differs.
inline constexpr double kTolExact = 1e-10;  // elementwise, gathers
inline constexpr double kTolFloat = 1e-8;   // float32 reductions (matmul, norms, attention)

// The cpu backend's prefill GEMM for BF16 weights rounds activations to BF16 (vdpbf16ps): relative
// error ~2^-9 per product, NMSE ~3e-6. Ops whose matmuls can take that path use this tolerance.
inline constexpr double kTolBf16Activations = 2e-5;
inline double matmul_tolerance(WeightFormat format) {
  return format == WeightFormat::kBF16 ? kTolBf16Activations : kTolFloat;
}

using CaseFn = std::function<void(Backend& backend, GuardedMatrix& out)>;

class Differential {
 public:
  Differential();
  // Runs `fn` into a fresh [rows, cols] GuardedMatrix on every backend and records the outcome.
  void check(const std::string& op, const std::string& case_name, int64_t rows, int64_t cols,
             double tolerance, const CaseFn& fn);
  // Fails the current test with the table when any case failed; returns the number of cases run.
  int finish();

 private:
  CaseTable table_;
};

}  // namespace day0::test
