#pragma once
// Rows [row0, row0 + rows) of a weight as a view of its own over the same bytes (a grouped
// projection's block, ops/kernel_args.h GroupedMatmulArgs).
#include <cstdint>

#include "day0/ops/tensor.h"

namespace day0 {

// Every format; FP8-block row blocks start and end on block rows (D0_CHECK: a caller's bug).
WeightView weight_row_block(const WeightView& w, int64_t row0, int64_t rows);

}  // namespace day0
