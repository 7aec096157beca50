#pragma once
// Hyper-connections (mHC) on the cpu backend: tokens in parallel; the streams' mixes through axpy.
#include "day0/backends/cpu/cpu_ops.h"

namespace day0::cpu {

void hc_weights(const Context& c, const HcWeightsArgs& a);
void hc_collapse(const Context& c, const HcCollapseArgs& a);
void hc_expand(const Context& c, const HcExpandArgs& a);

}  // namespace day0::cpu
