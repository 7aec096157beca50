#include "day0/model/tensor_manifest.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/model/family_registry.h"

namespace day0 {

std::string decoder_prefix(const ModelSpec& spec) {
  return spec.multimodal_wrapper ? "language_model.model." : "model.";
}

LayerSpec mtp_layer_spec(const ModelSpec& spec) {
  LayerSpec layer = spec.layers.empty() ? LayerSpec{} : spec.layers.back();
  if (spec.compressed_kv) {
    layer.kv_compress_ratio = 0;
    layer.compressed_sparse = false;
    layer.hash_routed = false;
  }
  return layer;
}

namespace {

// Upper bound on the tensors we are willing to list (a trillion-parameter MoE with FP8 scales holds ~140k).
constexpr int64_t kMaxTensors = 20'000'000;

int64_t estimated_tensor_count(const ModelSpec& s) {
  // Counted as if every expert had its own tensors (an upper bound for stacked-expert releases).
  const int64_t experts = s.moe ? s.moe->n_experts + s.moe->n_zero_experts : 0;
  // Both factors are bounded by the parser (layers <= 2^16, experts <= 2^20): no overflow here.
  return (s.n_layers + s.n_mtp_layers) * (2 * 3 * experts + 64) + 8;
}

}  // namespace

std::string renamed_for_layout(const StoredLayout& layout, const std::string& name) {
  std::string out = name;
  for (const NameRename& r : layout.renames) {
    if (r.prefix) {
      if (out.starts_with(r.canonical)) out = r.stored + out.substr(r.canonical.size());
      continue;
    }
    if (const size_t at = out.find(r.canonical); at != std::string::npos) {
      out.replace(at, r.canonical.size(), r.stored);
    }
  }
  return out;
}

namespace {

// The fused group `name` is a part of: {group, part index, the scope before the part, the expert of a
// stacked group (-1 in a pattern's "{E}")}, or nullopt.
struct FusedMatch {
  const FusedRows* group = nullptr;
  size_t part = 0;
  std::string scope;
  int64_t expert = -1;
};

// `name` = scope + part with "{E}" replaced by an expert index (or left as "{E}" in a pattern).
std::optional<FusedMatch> stacked_match(const FusedRows& f, size_t i, const std::string& name) {
  const std::string& part = f.parts[i];
  const size_t at = part.find("{E}");
  if (at == std::string::npos) return std::nullopt;
  const std::string pre = part.substr(0, at), post = part.substr(at + 3);
  if (!name.ends_with(post)) return std::nullopt;
  const std::string head = name.substr(0, name.size() - post.size());  // scope + pre + index
  const size_t index_at =
      head.size() >= 3 && head.ends_with("{E}") ? head.size() - 3 : head.find_last_not_of("0123456789") + 1;
  const std::string index = head.substr(index_at);
  const std::string before = head.substr(0, index_at);
  if (index.empty() || !before.ends_with(pre) || before.size() == pre.size() ||
      before[before.size() - pre.size() - 1] != '.') {
    return std::nullopt;
  }
  const int64_t expert = index == "{E}" ? -1 : std::stoll(index);
  return FusedMatch{&f, i, before.substr(0, before.size() - pre.size()), expert};
}

std::optional<FusedMatch> fused_match(const StoredLayout& layout, const std::string& name) {
  for (const FusedRows& f : layout.fused) {
    for (size_t i = 0; i < f.parts.size(); ++i) {
      if (f.stacked_experts > 0) {
        if (auto m = stacked_match(f, i, name)) return m;
        continue;
      }
      const std::string& part = f.parts[i];
      if (name.size() > part.size() && name.ends_with(part) && name[name.size() - part.size() - 1] == '.') {
        return FusedMatch{&f, i, name.substr(0, name.size() - part.size())};
      }
    }
  }
  return std::nullopt;
}

// A stacked group's part `i` of expert `e` under `scope`.
std::string expert_part(const FusedMatch& m, size_t i) {
  const std::string& part = m.group->parts[i];
  const size_t at = part.find("{E}");
  return m.scope + part.substr(0, at) + std::to_string(m.expert) + part.substr(at + 3);
}

// The stored tensor's name (without its rows): what a checkpoint in `layout` holds for `name`.
std::string stored_name(const StoredLayout& layout, const std::string& name) {
  if (const auto m = fused_match(layout, name))
    return renamed_for_layout(layout, m->scope) + m->group->stored;
  return renamed_for_layout(layout, name);
}

// An FP8 block scale (a float32 `weight_scale_inv` in the table) stored as `dtype` where the table
// accepts that too: the table's dtype becomes an accepted one.
void retype_block_scale(TensorSpec& t, DType dtype) {
  if (t.role != TensorRole::kQuantScale || t.storage != WeightStorage::kF32 || t.dtype == dtype ||
      !t.accepts(dtype)) {
    return;
  }
  std::erase(t.also_accepted, dtype);
  t.also_accepted.push_back(t.dtype);
  t.dtype = dtype;
  t.bytes = (checked_product(t.shape).value_or(0) * static_cast<uint64_t>(dtype_bits(dtype)) + 7) / 8;
}

}  // namespace

const StoredLayout* stored_layout_in_use(const TensorManifest& manifest,
                                         const std::function<bool(const std::string&)>& stored) {
  for (const StoredLayout& layout : manifest.stored_layouts) {
    // The first tensor the layout moves decides, and the first it fuses when that is another one (a layout
    // that renames and also stacks experts, beside one that only renames): each under the table's name
    // means another layout (or none).
    bool moved_seen = false, fused_seen = layout.fused.empty(), holds = true;
    for (const TensorSpec& t : manifest.tensors) {
      const std::string where = stored_name(layout, t.name);
      if (where == t.name) continue;
      const bool fused = fused_match(layout, t.name).has_value();
      if (moved_seen && (fused_seen || !fused)) continue;
      holds = holds && !stored(t.name) && stored(where);
      moved_seen = true;
      fused_seen = fused_seen || fused;
      if (!holds || fused_seen) break;
    }
    if (moved_seen && holds) return &layout;
  }
  return nullptr;
}

const StoredLayout* release_layout(const TensorManifest& manifest) {
  for (const StoredLayout& layout : manifest.stored_layouts) {
    if (layout.release) return &layout;
  }
  return nullptr;
}

std::map<std::string, StoredLocation> stored_locations(const TensorManifest& manifest,
                                                       const StoredLayout& layout) {
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto* list : {&manifest.tensors, &manifest.unused}) {
    for (const TensorSpec& t : *list) by_name[t.name] = &t;
  }
  std::map<std::string, StoredLocation> out;
  for (const auto& [name, t] : by_name) {
    StoredLocation loc{stored_name(layout, name)};
    if (const auto m = fused_match(layout, name)) {
      // Rows of the parts before this one, and of all of them; a part the table lacks is zero rows. A
      // stacked group repeats its parts' rows once per expert.
      const int64_t stacked = m->group->stacked_experts;
      loc.rows = t->shape.empty() ? 0 : t->shape[0];
      loc.stored_rows = 0;
      for (size_t i = 0; i < m->group->parts.size(); ++i) {
        const auto sibling = by_name.find(stacked > 0 ? expert_part(*m, i) : m->scope + m->group->parts[i]);
        const int64_t rows =
            sibling == by_name.end() || sibling->second->shape.empty() ? 0 : sibling->second->shape[0];
        if (i < m->part) loc.row_begin += rows;
        loc.stored_rows += rows;
      }
      if (stacked > 0) {
        loc.row_begin += m->expert * loc.stored_rows;
        loc.stored_rows *= stacked;
        loc.stacked_experts = stacked;
      }
    }
    out.emplace(name, std::move(loc));
  }
  return out;
}

TensorManifest to_stored_layout(const TensorManifest& manifest, const StoredLayout& layout) {
  const std::map<std::string, StoredLocation> where = stored_locations(manifest, layout);
  TensorManifest out = manifest;
  for (auto* list : {&out.tensors, &out.unused}) {
    std::vector<TensorSpec> moved;
    std::map<std::string, size_t> fused_at;  // stored name -> its entry in `moved`
    for (TensorSpec& t : *list) {
      if (layout.fp8_block_scale_dtype) retype_block_scale(t, *layout.fp8_block_scale_dtype);
      const StoredLocation& loc = where.at(t.name);
      const std::string pattern = stored_name(layout, t.pattern);
      if (!loc.view()) {
        t.name = loc.name;
        t.pattern = pattern;
        moved.push_back(std::move(t));
        continue;
      }
      const auto at = fused_at.find(loc.name);
      if (at == fused_at.end()) {
        fused_at.emplace(loc.name, moved.size());
        t.name = loc.name;
        t.pattern = pattern;
        t.shape[0] = loc.stored_rows;
        if (loc.stacked_experts > 0) {  // [E, rows of one expert, columns]
          t.shape = {loc.stacked_experts, loc.stored_rows / loc.stacked_experts, t.shape.back()};
          t.expert = -1;
        }
        t.slot = WeightSlot::kNone;  // bound through its parts' views
        moved.push_back(std::move(t));
        continue;
      }
      TensorSpec& group = moved[at->second];
      group.params += t.params;
      group.bytes += t.bytes;
    }
    *list = std::move(moved);
  }
  return out;
}

void adopt_stored_layout(TensorManifest& manifest, const std::function<bool(const std::string&)>& stored) {
  if (const StoredLayout* layout = stored_layout_in_use(manifest, stored)) {
    const StoredLayout copy = *layout;  // `manifest` is replaced below
    manifest = to_stored_layout(manifest, copy);
  }
}

Result<TensorManifest> build_tensor_manifest(const ModelSpec& s) {
  if (s.n_layers <= 0 || s.layers.size() != static_cast<size_t>(s.n_layers)) {
    return invalid_argument("tensor manifest: the spec's layer list does not match num_hidden_layers");
  }
  if (s.n_layers > (int64_t{1} << 20) || (s.moe && s.moe->n_experts > (int64_t{1} << 24)) ||
      s.n_mtp_layers < 0 || s.n_mtp_layers > 64) {
    return out_of_range("tensor manifest: too many layers or experts to list");
  }
  for (const auto& layer : s.layers) {
    if (layer.moe && !s.moe) return invalid_argument("tensor manifest: an MoE layer without MoE settings");
  }
  if ((s.attention == AttentionKind::kMla) != s.mla.has_value()) {
    return invalid_argument("tensor manifest: MLA attention without MLA sizes");
  }
  const int64_t estimate = estimated_tensor_count(s);
  if (estimate > kMaxTensors) {
    return resource_exhausted(
        fmt::format("tensor manifest: the config implies about {} tensors, more than the "
                    "{} we list; its layer or expert counts are implausible",
                    estimate, kMaxTensors));
  }
  TensorManifest manifest;
  WeightTableBuilder b(s, manifest);
  family_info(s.family).weights(s, b);
  if (b.failed()) return out_of_range(b.error());
  return manifest;
}

}  // namespace day0
