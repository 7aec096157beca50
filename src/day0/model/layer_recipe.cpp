#include "day0/model/layer_recipe.h"

#include <algorithm>

#include "day0/model/family_registry.h"

namespace day0 {

bool LayerRecipe::uses(LayerValue v) const {
  return std::any_of(steps.begin(), steps.end(), [v](const LayerStep& s) { return s.in == v || s.out == v; });
}

void add_norm(LayerRecipe& r, LayerNorm norm) {
  r.steps.push_back(
      {.op = LayerOp::kNorm, .in = LayerValue::kStream, .out = LayerValue::kNormed, .norm = norm});
}

void add_residual_block(LayerRecipe& r, LayerOp op, LayerValue in, bool out_norm, LayerNorm out_norm_weight) {
  r.steps.push_back({.op = op, .in = in, .out = LayerValue::kOut});
  if (out_norm) {
    r.steps.push_back({.op = LayerOp::kOutputNorm,
                       .in = LayerValue::kOut,
                       .out = LayerValue::kOut,
                       .norm = out_norm_weight});
  }
  r.steps.push_back({.op = LayerOp::kResidualAdd, .in = LayerValue::kOut, .out = LayerValue::kStream});
}

LayerRecipe standard_layer_recipe(const ModelSpec& spec, int64_t layer) {
  const LayerSpec& ls = spec.layers[static_cast<size_t>(layer)];
  const LayerOp ffn = !ls.moe                     ? LayerOp::kDenseMlp
                      : spec.dense_mlp_beside_moe ? LayerOp::kDenseMlpBesideMoe
                                                  : LayerOp::kMoe;
  LayerRecipe r;
  add_norm(r, LayerNorm::kInput);
  if (ls.no_ffn || ls.no_mixer) {  // one block through the layer's one norm
    add_residual_block(r, ls.no_ffn ? LayerOp::kMixer : ffn, LayerValue::kNormed, false, LayerNorm::kInput);
    return r;
  }
  add_residual_block(r, LayerOp::kMixer, LayerValue::kNormed, spec.sandwich_norms, LayerNorm::kAttnOut);
  add_norm(r, LayerNorm::kPost);
  add_residual_block(r, ffn, LayerValue::kNormed, spec.sandwich_norms, LayerNorm::kFfnOut);
  if (spec.per_layer_input) r.steps.push_back({.op = LayerOp::kPerLayerInput, .out = LayerValue::kStream});
  if (spec.layer_scalar) r.steps.push_back({.op = LayerOp::kLayerScalar, .out = LayerValue::kStream});
  return r;
}

LayerRecipe hyper_connection_layer_recipe(const ModelSpec& spec, int64_t layer) {
  const LayerSpec& ls = spec.layers[static_cast<size_t>(layer)];
  LayerRecipe r;
  const auto block = [&r](LayerHc hc, LayerNorm norm, LayerOp op) {
    r.steps.push_back(
        {.op = LayerOp::kHcCollapse, .in = LayerValue::kStream, .out = LayerValue::kOut, .hc = hc});
    r.steps.push_back(
        {.op = LayerOp::kNorm, .in = LayerValue::kOut, .out = LayerValue::kNormed, .norm = norm});
    r.steps.push_back({.op = op, .in = LayerValue::kNormed, .out = LayerValue::kOut});
    r.steps.push_back({.op = LayerOp::kHcExpand, .in = LayerValue::kOut, .out = LayerValue::kStream});
  };
  block(LayerHc::kAttn, LayerNorm::kInput, LayerOp::kMixer);
  block(LayerHc::kFfn, LayerNorm::kPost, ls.moe ? LayerOp::kMoe : LayerOp::kDenseMlp);
  return r;
}

LayerRecipe layer_recipe(const ModelSpec& spec, int64_t layer) {
  const auto& families = family_registry();
  const auto it = std::find_if(families.begin(), families.end(),
                               [&](const FamilyInfo& f) { return f.name() == spec.family; });
  if (it != families.end() && it->layer_recipe != nullptr) return it->layer_recipe(spec, layer);
  return standard_layer_recipe(spec, layer);
}

std::vector<LayerRecipe> layer_recipes(const ModelSpec& spec) {
  std::vector<LayerRecipe> out;
  out.reserve(spec.layers.size());
  for (int64_t l = 0; l < static_cast<int64_t>(spec.layers.size()); ++l) out.push_back(layer_recipe(spec, l));
  return out;
}

const char* layer_op_name(LayerOp op) {
  switch (op) {
    case LayerOp::kNorm:
      return "norm";
    case LayerOp::kOutputNorm:
      return "out_norm";
    case LayerOp::kMixer:
      return "mixer";
    case LayerOp::kDenseMlp:
      return "mlp";
    case LayerOp::kMoe:
      return "moe";
    case LayerOp::kDenseMlpBesideMoe:
      return "mlp+moe";
    case LayerOp::kResidualAdd:
      return "add";
    case LayerOp::kPerLayerInput:
      return "per_layer_input";
    case LayerOp::kLayerScalar:
      return "layer_scalar";
    case LayerOp::kHcCollapse:
      return "hc_collapse";
    case LayerOp::kHcExpand:
      return "hc_expand";
  }
  return "?";
}

const char* layer_value_name(LayerValue v) {
  switch (v) {
    case LayerValue::kStream:
      return "stream";
    case LayerValue::kNormed:
      return "normed";
    case LayerValue::kOut:
      return "out";
    case LayerValue::kSide:
      return "side";
    case LayerValue::kCarry:
      return "carry";
  }
  return "?";
}

const char* layer_norm_name(LayerNorm n) {
  switch (n) {
    case LayerNorm::kInput:
      return "input";
    case LayerNorm::kPost:
      return "post";
    case LayerNorm::kAttnOut:
      return "attn_out";
    case LayerNorm::kFfnOut:
      return "ffn_out";
  }
  return "?";
}

const char* layer_hc_name(LayerHc hc) {
  return hc == LayerHc::kAttn ? "attn" : "ffn";
}

std::string describe_recipe(const LayerRecipe& r) {
  std::string out;
  for (const LayerStep& s : r.steps) {
    if (!out.empty()) out += " > ";
    out += layer_op_name(s.op);
    switch (s.op) {
      case LayerOp::kNorm:
      case LayerOp::kOutputNorm:
        out += std::string("(") + layer_norm_name(s.norm) + ")";
        break;
      case LayerOp::kResidualAdd:
        if (s.in != LayerValue::kOut) out += std::string("(") + layer_value_name(s.in) + ")";
        break;
      case LayerOp::kHcCollapse:
        out += std::string("(") + layer_hc_name(s.hc) + ")";
        break;
      case LayerOp::kPerLayerInput:
      case LayerOp::kLayerScalar:
      case LayerOp::kHcExpand:
        break;
      default:
        // A block reading something other than the norm's output, or writing elsewhere than kOut.
        if (s.in != LayerValue::kNormed || s.out != LayerValue::kOut) {
          out += std::string("(") + layer_value_name(s.in) + "->" + layer_value_name(s.out) + ")";
        }
        break;
    }
  }
  return out;
}

}  // namespace day0
