#pragma once
// The kernel table (ops/kernel_list.h: D0_FOR_EACH_KERNEL, one row per kernel as method, argument
// struct, op name constant) and what wrappers of a Backend (reference, recording, timing, the fallback
// resolver) build from it, so that none keeps a list of its own that could drift from backend.h.
#include "day0/ops/kernel_list.h"

// Declares every kernel as an override, inside a class deriving from Backend.
#define D0_KERNEL_OVERRIDE(method, Args, op) void method(const Args& a) override;
#define D0_DECLARE_KERNEL_OVERRIDES D0_FOR_EACH_KERNEL(D0_KERNEL_OVERRIDE)
