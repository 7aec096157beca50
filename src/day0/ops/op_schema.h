#pragma once
// The op schema table: the single source of truth about every op the model's operator list can name
// (op_names.h): its inputs, outputs, attributes, shape function and the simpler ops it decomposes
// into when a backend has no native kernel for it. Backends, the fallback resolver, `day0 coverage`
// and the support matrix all read this table.
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/ops/op_key.h"

namespace day0 {

using Shape = std::vector<int64_t>;
using OpAttributes = std::map<std::string, double, std::less<>>;
// Output shapes from input shapes (in schema order) and attributes; InvalidArgument on a mismatch.
using ShapeFn = Result<std::vector<Shape>> (*)(std::span<const Shape> inputs, const OpAttributes& attrs);

struct OpSchema {
  std::string_view name;
  std::string_view summary;
  std::vector<std::string_view> inputs;  // "name [dims]"
  std::vector<std::string_view> outputs;
  std::vector<std::string_view> attributes;  // names read from OpAttributes by the shape function
  bool reads_weights = false;                // supports() is keyed by the weight format
  bool primitive = false;                    // only appears as a decomposition target
  ShapeFn shape = nullptr;
  // Ops a call is rewritten into (ops/decompositions.h); empty: no decomposition.
  std::vector<std::string_view> decomposition;
};

const std::vector<OpSchema>& op_schemas();
const OpSchema* find_op_schema(std::string_view name);

// The (op, weight format) keys a decomposition of `op` calls: weight-reading pieces inherit `format`.
std::vector<OpKey> decomposition_keys(std::string_view op, WeightFormat format);

}  // namespace day0
