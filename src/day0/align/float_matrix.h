#pragma once
// A dense row-major F32 matrix: the currency of alignment (logits [T, vocab], hidden [T, hidden]).
#include <cstdint>
#include <span>
#include <vector>

#include "day0/core/error.h"

namespace day0 {

struct FloatMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;  // rows * cols

  FloatMatrix() = default;
  FloatMatrix(int64_t r, int64_t c) : rows(r), cols(c), data(static_cast<size_t>(r * c), 0.0f) {
    D0_CHECK(r >= 0 && c >= 0);
  }
  std::span<const float> row(int64_t r) const {
    D0_CHECK(r >= 0 && r < rows);
    return {data.data() + r * cols, static_cast<size_t>(cols)};
  }
  std::span<float> row(int64_t r) {
    D0_CHECK(r >= 0 && r < rows);
    return {data.data() + r * cols, static_cast<size_t>(cols)};
  }
  bool same_shape(const FloatMatrix& o) const { return rows == o.rows && cols == o.cols; }
};

}  // namespace day0
