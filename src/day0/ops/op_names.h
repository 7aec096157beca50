#pragma once
// Canonical operator names shared by the model's recorded operator list (runtime/op_recording.h) and
// the op registry (ops/op_schema.h): coverage joins the two on these strings. Generated from the
// kernel table (ops/kernel_list.h): op::kRmsNorm is "rms_norm", the name of the kernel's method.
#include <string_view>

#include "day0/ops/kernel_list.h"

namespace day0::op {

#define D0_OP_NAME(method, Args, constant) inline constexpr std::string_view constant = #method;
D0_FOR_EACH_KERNEL(D0_OP_NAME)
#undef D0_OP_NAME

}  // namespace day0::op
