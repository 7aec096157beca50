#pragma once
// Stored layouts: names under which a checkpoint holds the tensors of a weight table other than the
// table's own. transformers maps some model types onto another family's modules and converts the
// release's tensor names on load (conversion_mapping.py: renamings, and fused tensors split by rows);
// a family declares the same conversion here, on its table's names, so that Day0 reads the release's
// tensors where they are, without copying them. A fused tensor's parts are row blocks of one stored
// tensor: row-major storage makes each part a contiguous view.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "day0/core/dtype.h"

namespace day0 {

// One renaming: `canonical` (a part of the table's name) is stored as `stored`. A prefix renaming
// applies only at the start of a name; the others replace the first occurrence anywhere.
struct NameRename {
  std::string canonical;
  std::string stored;
  bool prefix = false;
  bool operator==(const NameRename&) const = default;
};

// Tensors of one scope whose names end in `parts` (in row order) are the row blocks of one stored
// tensor: the scope (the name before the part, renamed like any name) followed by `stored`.
struct FusedRows {
  std::vector<std::string> parts;  // e.g. "self_attn.q_proj.weight", "self_attn.k_proj.weight", ...
  std::string stored;              // e.g. "attention.query_key_value.weight"
  // Parts of one routed expert ("experts.{E}.gate_proj.weight", "experts.{E}.up_proj.weight") stored
  // stacked: [stacked_experts, the parts' rows of one expert, columns], expert by expert (Qwen3.5-MoE's
  // experts.gate_up_proj). 0: the parts are the only rows.
  int64_t stacked_experts = 0;
  bool operator==(const FusedRows&) const = default;
};

struct StoredLayout {
  std::string name;                 // for messages: the layout's origin ("exaone release names")
  std::vector<NameRename> renames;  // applied in order
  std::vector<FusedRows> fused;
  // The layout the releases ship (synth writes it); false: an alternative some saves use.
  bool release = false;
  // The dtype the layout stores FP8 block scales in, where the table accepts it as well as its own
  // (DeepSeek-V4's release: F8_E8M0 exponent bytes beside ue8m0 float32 in the table); unset: the table's.
  std::optional<DType> fp8_block_scale_dtype;
  bool operator==(const StoredLayout&) const = default;
};

// Where one tensor of the table lives in a checkpoint of a layout: the stored tensor's name and, for
// a part of a fused tensor, its rows [row_begin, row_begin + rows) of the stored tensor's `stored_rows`.
struct StoredLocation {
  std::string name;
  int64_t row_begin = 0;
  int64_t rows = -1;  // -1: the whole stored tensor
  int64_t stored_rows = -1;
  int64_t stacked_experts = 0;  // the stored tensor is [stacked_experts, stored_rows / that, columns]
  bool view() const { return rows >= 0; }
};

// `name` with the layout's renamings applied (not its fusions).
std::string renamed_for_layout(const StoredLayout& layout, const std::string& name);

}  // namespace day0
