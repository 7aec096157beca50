#include "day0/model/weight_table.h"

#include <algorithm>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/model/model_spec.h"
#include "day0/model/nvfp4_config.h"
#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding:
      return "embedding";
    case TensorRole::kLmHead:
      return "lm_head";
    case TensorRole::kNorm:
      return "norm";
    case TensorRole::kAttention:
      return "attention";
    case TensorRole::kDenseMlp:
      return "dense_mlp";
    case TensorRole::kRouter:
      return "router";
    case TensorRole::kRoutedExpert:
      return "routed_expert";
    case TensorRole::kSharedExpert:
      return "shared_expert";
    case TensorRole::kHyperConnection:
      return "hyper_connection";
    case TensorRole::kQuantScale:
      return "quant_scale";
  }
  return "unknown";
}

const char* shard_rule_name(ShardRule rule) {
  switch (rule) {
    case ShardRule::kReplicated:
      return "replicated";
    case ShardRule::kColumn:
      return "column";
    case ShardRule::kColumnKv:
      return "column_kv";
    case ShardRule::kRow:
      return "row";
    case ShardRule::kExpert:
      return "expert";
    case ShardRule::kVocab:
      return "vocab";
  }
  return "unknown";
}

bool TensorSpec::accepts(DType found) const {
  if (found == dtype) return true;
  for (DType d : also_accepted) {
    if (d == found) return true;
  }
  return false;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return b <= 0 ? 0 : (a + b - 1) / b;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

bool is_float_dtype(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

std::string strip_weight_suffix(const std::string& name) {
  const std::string tail = ".weight";
  return name.ends_with(tail) ? name.substr(0, name.size() - tail.size()) : name;
}

}  // namespace

WeightTableBuilder::WeightTableBuilder(const ModelSpec& spec, TensorManifest& out)
    : spec_(spec), out_(out), prefix_(decoder_prefix(spec)), scope_(prefix_), scope_pattern_(prefix_) {}

void WeightTableBuilder::begin_layer(int64_t layer, int64_t hf_layer) {
  layer_ = layer;
  scope_ = fmt::format("{}layers.{}.", prefix_, hf_layer >= 0 ? hf_layer : layer);
  scope_pattern_ = prefix_ + "layers.{L}.";
}

void WeightTableBuilder::begin_mtp_scope(int64_t layer, std::string scope) {
  layer_ = std::max(layer, spec_.n_layers);  // marks the tensors `mtp`
  scope_ = std::move(scope);
  scope_pattern_ = scope_;
}

void WeightTableBuilder::end_layer() {
  layer_ = -1;
  scope_ = prefix_;
  scope_pattern_ = prefix_;
}

void WeightTableBuilder::add_absolute(std::string name, std::vector<int64_t> shape, WeightStorage storage,
                                      TensorRole role, ShardSpec shard, WeightSlot slot) {
  std::string pattern = name;
  push_weight(std::move(name), std::move(pattern), std::move(shape), storage, role, shard, slot, -1);
}

void WeightTableBuilder::add(const std::string& name, std::vector<int64_t> shape, WeightStorage storage,
                             TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert) {
  const std::string pattern = scope_pattern_ + name;
  if (expert >= 0) {
    push_weight(scope_ + replace_all(name, "{E}", std::to_string(expert)), pattern, std::move(shape), storage,
                role, shard, slot, expert);
    return;
  }
  if (name.find("{E}") == std::string::npos) {
    push_weight(scope_ + name, pattern, std::move(shape), storage, role, shard, slot, -1);
    return;
  }
  const int64_t experts = spec_.moe ? spec_.moe->n_experts : 0;
  for (int64_t e = 0; e < experts; ++e) {
    push_weight(scope_ + replace_all(name, "{E}", std::to_string(e)), pattern, shape, storage, role, shard,
                slot, e);
  }
}

void WeightTableBuilder::add_unused(const std::string& name, std::vector<int64_t> shape,
                                    WeightStorage storage, TensorRole role, int64_t expert) {
  const size_t before = out_.tensors.size();
  add(name, std::move(shape), storage, role, ShardSpec{}, WeightSlot::kNone, expert);
  // Moved out of the tensor list: nothing that walks the model's tensors sees it.
  for (size_t i = before; i < out_.tensors.size(); ++i) out_.unused.push_back(std::move(out_.tensors[i]));
  out_.tensors.resize(before);
}

void WeightTableBuilder::ignore_prefix(std::string prefix) {
  out_.ignored_prefixes.push_back(std::move(prefix));
}

void WeightTableBuilder::alias_prefix(std::string canonical, std::string alternative) {
  StoredLayout layout;
  layout.name = "tensors under " + alternative;
  layout.renames.push_back(NameRename{std::move(canonical), std::move(alternative), true});
  out_.stored_layouts.push_back(std::move(layout));
}

void WeightTableBuilder::stored_layout(StoredLayout layout) {
  out_.stored_layouts.push_back(std::move(layout));
}

void WeightTableBuilder::push_weight(std::string name, std::string pattern, std::vector<int64_t> shape,
                                     WeightStorage storage, TensorRole role, ShardSpec shard, WeightSlot slot,
                                     int64_t expert) {
  const DType act = spec_.activation_dtype;
  switch (storage) {
    case WeightStorage::kPlain:
      // An LM head that a head config group packs (day0 quantize --head int8).
      if (role == TensorRole::kLmHead && shape.size() == 2 &&
          packs_module(spec_.weights.packed, strip_weight_suffix(name), true)) {
        push_packed(std::move(name), std::move(pattern), std::move(shape), role, shard, slot, expert);
        return;
      }
      push(std::move(name), std::move(pattern), std::move(shape), act, storage, role, shard, slot, expert);
      return;
    case WeightStorage::kKeptF32:
      push(std::move(name), std::move(pattern), std::move(shape), act, storage, role, shard, slot, expert);
      if (!failed_ && act != DType::kF32) out_.tensors.back().also_accepted = {DType::kF32};
      return;
    case WeightStorage::kF32:
      push(std::move(name), std::move(pattern), std::move(shape), DType::kF32, storage, role, shard, slot,
           expert);
      if (!failed_ && act != DType::kF32) out_.tensors.back().also_accepted = {act};
      return;
    case WeightStorage::kI64:
      push(std::move(name), std::move(pattern), std::move(shape), DType::kI64, storage, role, shard, slot,
           expert);
      if (!failed_) out_.tensors.back().also_accepted = {DType::kI32};
      return;
    case WeightStorage::kMxfp4Blocks:
    case WeightStorage::kMxfp4Scales:
      // Scales: `role` names the weight they scale; the tensor itself holds no parameters.
      push(std::move(name), std::move(pattern), std::move(shape), DType::kU8, storage,
           storage == WeightStorage::kMxfp4Scales ? TensorRole::kQuantScale : role, shard, slot, expert);
      if (!failed_ && storage == WeightStorage::kMxfp4Scales) {
        out_.tensors.back().also_accepted = {DType::kF8E8M0};
        out_.tensors.back().scaled_role = role;
      }
      return;
    case WeightStorage::kProjection:
    case WeightStorage::kPackedInt:
    case WeightStorage::kFp4Packed:
    case WeightStorage::kNvfp4Scale:
      break;
  }
  if (role == TensorRole::kRoutedExpert && spec_.weights.fp4_expert_group > 0 && shape.size() == 2) {
    push_fp4(std::move(name), std::move(pattern), std::move(shape), role, shard, slot, expert);
    return;
  }
  if (shape.size() == 2 && nvfp4_module(spec_.weights.nvfp4, strip_weight_suffix(name))) {
    push_nvfp4(std::move(name), std::move(pattern), std::move(shape), role, shard, slot, expert);
    return;
  }
  if (shape.size() == 2 && packs_module(spec_.weights.packed, strip_weight_suffix(name), true)) {
    push_packed(std::move(name), std::move(pattern), std::move(shape), role, shard, slot, expert);
    return;
  }
  if (spec_.weights.format != WeightFormat::kFp8Block || shape.size() != 2) {
    push(std::move(name), std::move(pattern), std::move(shape), act, storage, role, shard, slot, expert);
    return;
  }
  std::vector<int64_t> scale_shape = {ceil_div(shape[0], spec_.weights.block_rows),
                                      ceil_div(shape[1], spec_.weights.block_cols)};
  push(name, pattern, std::move(shape), DType::kF8E4M3, storage, role, shard, slot, expert);
  const DType scale_dtype = spec_.weights.fp8_scale_dtype();
  push(name + "_scale_inv", pattern + "_scale_inv", std::move(scale_shape), scale_dtype, WeightStorage::kF32,
       TensorRole::kQuantScale, shard, WeightSlot::kNone, expert);
  if (failed_) return;
  out_.tensors.back().scaled_role = role;
  // ue8m0 scales arrive as float32 powers of two or as exponent bytes (F8_E8M0, or U8 where the writer
  // had no E8M0 dtype); float scales only as float32.
  out_.tensors.back().also_accepted.clear();
  if (spec_.weights.ue8m0_scales) {
    for (DType d : {DType::kF32, DType::kF8E8M0, DType::kU8}) {
      if (d != scale_dtype) out_.tensors.back().also_accepted.push_back(d);
    }
  }
}

// FP4 projections (DeepSeek-V4's routed experts): `weight` holds the E2M1 nibbles, even column in the low
// nibble, as I8 (U8 accepted); `weight_scale_inv` one E8M0 exponent byte per group of columns.
void WeightTableBuilder::push_fp4(std::string name, std::string pattern, std::vector<int64_t> shape,
                                  TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert) {
  const int64_t rows = shape[0], cols = shape[1], group = spec_.weights.fp4_expert_group;
  if (cols % 32 != 0) {
    failed_ = true;
    error_ = fmt::format("tensor {}: FP4 weights need a multiple of 32 columns, found {}", name, cols);
    return;
  }
  push(name, pattern, {rows, cols / 2}, DType::kI8, WeightStorage::kFp4Packed, role, shard, slot, expert);
  if (failed_) return;
  out_.tensors.back().also_accepted = {DType::kU8};
  push(name + "_scale_inv", pattern + "_scale_inv", {rows, cols / group}, DType::kF8E8M0,
       WeightStorage::kMxfp4Scales, TensorRole::kQuantScale, shard, WeightSlot::kNone, expert);
  if (failed_) return;
  out_.tensors.back().also_accepted = {DType::kU8};
  out_.tensors.back().scaled_role = role;
}

// NVFP4 projections (model_spec.h, Nvfp4Layout): the nibbles hold the parameters; the E4M3 group scales,
// the global scale and the activation scale hold none.
void WeightTableBuilder::push_nvfp4(std::string name, std::string pattern, std::vector<int64_t> shape,
                                    TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert) {
  const int64_t rows = shape[0], cols = shape[1];
  if (cols % 32 != 0) {
    failed_ = true;
    error_ = fmt::format("tensor {}: NVFP4 weights need a multiple of 32 columns, found {}", name, cols);
    return;
  }
  const Nvfp4Layout layout = spec_.weights.nvfp4.layout;
  const Nvfp4TensorNames names = nvfp4_tensor_names(layout, strip_weight_suffix(name));
  const Nvfp4TensorNames patterns = nvfp4_tensor_names(layout, strip_weight_suffix(pattern));
  // ModelOpt writes its scalars 0-D; compressed-tensors as [1].
  const std::vector<int64_t> scalar =
      layout == Nvfp4Layout::kModelOpt ? std::vector<int64_t>{} : std::vector<int64_t>{1};
  push(names.values, patterns.values, {rows, cols / 2}, DType::kU8, WeightStorage::kFp4Packed, role, shard,
       slot, expert);
  if (failed_) return;
  out_.tensors.back().also_accepted = {DType::kI8};
  const auto add_scale = [&](const std::string& n, const std::string& p, std::vector<int64_t> s,
                             DType dtype) {
    push(n, p, std::move(s), dtype, WeightStorage::kNvfp4Scale, TensorRole::kQuantScale, shard,
         WeightSlot::kNone, expert);
    if (!failed_) out_.tensors.back().scaled_role = role;
  };
  add_scale(names.scales, patterns.scales, {rows, cols / 16}, DType::kF8E4M3);
  add_scale(names.global_scale, patterns.global_scale, scalar, DType::kF32);
  if (spec_.weights.nvfp4.activation_scales)
    add_scale(names.input_scale, patterns.input_scale, scalar, DType::kF32);
}

// Integer-packed projections: compressed-tensors turns the weight into `weight_packed` (holding the
// parameters) plus scale, optional zero point and shape tensors (holding none); GPTQ into qweight,
// qzeros, scales and g_idx; AWQ into qweight, qzeros and scales.
void WeightTableBuilder::push_packed(std::string name, std::string pattern, std::vector<int64_t> shape,
                                     TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert) {
  const PackedIntSpec& p = spec_.weights.packed;
  const int64_t per_word = 32 / packed_bits_of(p, strip_weight_suffix(name));
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t groups = p.group_size > 0 ? ceil_div(cols, p.group_size) : 1;
  const std::string stem = strip_weight_suffix(name), stem_pattern = strip_weight_suffix(pattern);
  const DType act = spec_.activation_dtype;
  const auto add_values = [&](const char* suffix, std::vector<int64_t> packed_shape) {
    push(stem + suffix, stem_pattern + suffix, std::move(packed_shape), DType::kI32,
         WeightStorage::kPackedInt, role, shard, slot, expert);
    if (!failed_) out_.tensors.back().params = rows * cols;  // padding bits of a last word hold no parameter
  };
  const auto add_aux = [&](const char* suffix, std::vector<int64_t> aux_shape, DType dtype) {
    push(stem + suffix, stem_pattern + suffix, std::move(aux_shape), dtype, WeightStorage::kPackedInt,
         TensorRole::kQuantScale, shard, WeightSlot::kNone, expert);
    if (failed_) return;
    out_.tensors.back().scaled_role = role;
    if (is_float_dtype(dtype)) {
      // Scales come in the model dtype, F16 (GPTQ / AWQ releases) or F32.
      for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
        if (d != dtype) out_.tensors.back().also_accepted.push_back(d);
      }
    }
  };
  if (p.layout == PackedIntLayout::kGptq || p.layout == PackedIntLayout::kAwq) {
    // [in, out] orientation: the output features are the columns of these tensors.
    if (p.layout == PackedIntLayout::kGptq) {
      add_values(".qweight", {ceil_div(cols, per_word), rows});
    } else {
      add_values(".qweight", {cols, ceil_div(rows, per_word)});
    }
    add_aux(".qzeros", {groups, ceil_div(rows, per_word)}, DType::kI32);
    add_aux(".scales", {groups, rows}, act);
    if (p.layout == PackedIntLayout::kGptq) add_aux(".g_idx", {cols}, DType::kI32);
    return;
  }
  add_values(".weight_packed", {rows, ceil_div(cols, per_word)});
  add_aux(".weight_scale", {rows, groups}, act);
  if (!p.symmetric) add_aux(".weight_zero_point", {ceil_div(rows, per_word), groups}, DType::kI32);
  add_aux(".weight_shape", {2}, DType::kI64);
}

void WeightTableBuilder::push(std::string name, std::string pattern, std::vector<int64_t> shape, DType dtype,
                              WeightStorage storage, TensorRole role, ShardSpec shard, WeightSlot slot,
                              int64_t expert) {
  if (failed_) return;
  // MXFP4 blocks hold two 4-bit values a byte; scales hold no parameters.
  const uint64_t per_element = storage == WeightStorage::kMxfp4Blocks || storage == WeightStorage::kFp4Packed
                                   ? 2
                               : storage == WeightStorage::kMxfp4Scales ? 0
                               : role == TensorRole::kQuantScale        ? 0
                               : storage == WeightStorage::kI64         ? 0
                                                                        : 1;
  const auto elements = checked_product(shape);
  const auto params = elements ? checked_mul(*elements, per_element) : std::nullopt;
  const auto bits =
      elements ? checked_mul(*elements, static_cast<uint64_t>(dtype_bits(dtype))) : std::nullopt;
  if (!elements || !params || !bits || *params > static_cast<uint64_t>(INT64_MAX)) {
    failed_ = true;
    error_ = fmt::format("tensor {}: its size overflows 64 bits; the config's sizes are too large", name);
    return;
  }
  TensorSpec t;
  t.name = std::move(name);
  t.pattern = std::move(pattern);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.role = role;
  t.layer = layer_;
  t.expert = expert;
  t.params = static_cast<int64_t>(*params);
  t.bytes = (*bits + 7) / 8;
  t.storage = storage;
  t.shard = shard;
  t.slot = slot;
  t.mtp = layer_ >= spec_.n_layers;
  out_.tensors.push_back(std::move(t));
}

}  // namespace day0
