#pragma once
// What Backend::supports() is asked about: an op name from op_names.h and, for ops that read weights
// (matmul, embedding, mla_attention, moe_experts), the weight format. Activations are float32.
#include <string_view>

#include "day0/model/model_spec.h"

namespace day0 {

struct OpKey {
  std::string_view op;
  WeightFormat weights = WeightFormat::kF32;
  bool operator==(const OpKey&) const = default;
};

}  // namespace day0
