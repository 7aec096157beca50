#pragma once
// Compressed attention on the cpu backend: the gated pooling of kv_compress, windows in parallel.
#include "day0/backends/cpu/cpu_ops.h"

namespace day0::cpu {

void kv_compress(const Context& c, const KvCompressArgs& a);

}  // namespace day0::cpu
