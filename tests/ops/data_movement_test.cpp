// round_bf16 and copy_columns, the two kernels the blocks call instead of touching elements on the
// host: hand-worked values on every backend, and the argument checks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/core/error.h"

namespace day0 {
namespace {

float from_bits(uint32_t b) {
  return std::bit_cast<float>(b);
}

std::vector<std::unique_ptr<Backend>> every_backend() {
  std::vector<std::unique_ptr<Backend>> out;
  for (const std::string& name : {std::string("reference"), std::string("cpu")}) {
    auto be = make_backend(name);
    EXPECT_TRUE(be.is_ok()) << name;
    if (be.is_ok()) out.push_back(std::move(*be));
  }
  return out;
}

TEST(RoundBf16, TiesToEvenKeepsNanAndInfinityOnEveryBackend) {
  // [1, 8]: exact, a tie rounding down to even, a tie rounding up to even, just above a tie, the
  // largest float (rounds to infinity), infinity, a NaN whose payload is only in the low bits, -0.
  const std::vector<float> in = {1.0f,
                                 from_bits(0x3F808000u),  // 1 + 2^-8: tie, mantissa even -> 1.0
                                 from_bits(0x3F818000u),  // tie, odd -> rounds up to 0x3F82
                                 from_bits(0x3F808001u),  // above the tie -> 0x3F81
                                 std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::infinity(),
                                 from_bits(0x7F800001u),
                                 -0.0f};
  const std::vector<uint32_t> want = {0x3F800000u, 0x3F800000u, 0x3F820000u, 0x3F810000u,
                                      0x7F800000u, 0x7F800000u, 0,           0x80000000u};
  for (auto& be : every_backend()) {
    std::vector<float> out(in.size(), 7.0f);
    be->round_bf16({.x = ConstMatrix(in.data(), 1, 8), .y = Matrix(out.data(), 1, 8)});
    for (size_t i = 0; i < in.size(); ++i) {
      if (i == 6) {
        EXPECT_TRUE(std::isnan(out[i])) << be->name();
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), want[i]) << be->name() << " element " << i;
      }
    }
    // In place, as the blocks call it.
    std::vector<float> inplace = in;
    be->round_bf16({.x = ConstMatrix(inplace.data(), 2, 4), .y = Matrix(inplace.data(), 2, 4)});
    EXPECT_EQ(std::bit_cast<uint32_t>(inplace[2]), 0x3F820000u) << be->name();
  }
}

TEST(CopyColumns, GathersAndScattersHeadPartsOnEveryBackend) {
  // x [2, 12] = 3 heads of 4 columns; the last 2 columns of each head -> dense [2, 6], and back.
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  for (auto& be : every_backend()) {
    std::vector<float> dense(12, -1.0f);
    be->copy_columns({.x = ConstMatrix(x.data(), 2, 12),
                      .y = Matrix(dense.data(), 2, 6),
                      .groups = 3,
                      .width = 2,
                      .x_col0 = 2,
                      .x_stride = 4,
                      .y_col0 = 0,
                      .y_stride = 2});
    const std::vector<float> want = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23};
    EXPECT_EQ(dense, want) << be->name();
    for (float& v : dense) v = -v;
    std::vector<float> wide = x;
    be->copy_columns({.x = ConstMatrix(dense.data(), 2, 6),
                      .y = Matrix(wide.data(), 2, 12),
                      .groups = 3,
                      .width = 2,
                      .x_col0 = 0,
                      .x_stride = 2,
                      .y_col0 = 2,
                      .y_stride = 4});
    for (int64_t c = 0; c < 24; ++c) {
      const bool rope_part = c % 4 >= 2;
      EXPECT_EQ(wide[static_cast<size_t>(c)],
                rope_part ? -x[static_cast<size_t>(c)] : x[static_cast<size_t>(c)])
          << be->name() << " column " << c;
    }
  }
}

TEST(CopyColumns, RejectsRangesPastEitherMatrixAndOverlap) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.is_ok());
  std::vector<float> x(24), y(12);
  const ConstMatrix xm(x.data(), 2, 12);
  const Matrix ym(y.data(), 2, 6);
  EXPECT_THROW((*be)->copy_columns({.x = xm,
                                    .y = ym,
                                    .groups = 3,
                                    .width = 2,
                                    .x_col0 = 3,
                                    .x_stride = 4,
                                    .y_col0 = 0,
                                    .y_stride = 2}),
               InternalError);  // last group reads column 12 of 12
  EXPECT_THROW((*be)->copy_columns({.x = xm,
                                    .y = ym,
                                    .groups = 3,
                                    .width = 2,
                                    .x_col0 = 0,
                                    .x_stride = 4,
                                    .y_col0 = 1,
                                    .y_stride = 2}),
               InternalError);  // last group writes column 6 of 6
  EXPECT_THROW((*be)->copy_columns({.x = xm,
                                    .y = ym,
                                    .groups = 2,
                                    .width = 3,
                                    .x_col0 = 0,
                                    .x_stride = 2,
                                    .y_col0 = 0,
                                    .y_stride = 3}),
               InternalError);  // stride below width
  EXPECT_THROW(
      (*be)->copy_columns(
          {.x = ConstMatrix(x.data(), 2, 12), .y = Matrix(x.data() + 6, 2, 6), .groups = 1, .width = 2}),
      InternalError);  // y inside x
}

}  // namespace
}  // namespace day0
