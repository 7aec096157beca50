#pragma once
// The tensor manifest: every weight tensor a checkpoint of a ModelSpec holds, with its Hugging Face
// name, shape, dtype, shard rule and engine slot: the expansion of the family's weight table
// (weight_table.h). Single source of truth for parameter counts, verification, synth, loading and the
// planner's weight groups.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/stored_layout.h"
#include "day0/model/weight_table.h"

namespace day0 {

struct TensorSpec {
  std::string name;            // e.g. "model.layers.3.mlp.experts.17.down_proj.weight"
  std::vector<int64_t> shape;  // as stored in the checkpoint
  DType dtype = DType::kBF16;  // what synth writes and the release most often stores
  TensorRole role = TensorRole::kAttention;
  int64_t layer = -1;   // -1: not in a decoder layer
  int64_t expert = -1;  // routed expert index, -1 otherwise
  int64_t params = 0;   // logical parameters it holds (MXFP4 blocks: 2 per byte; scales: 0)
  uint64_t bytes = 0;   // stored bytes
  // Weight-table fields.
  std::string pattern;  // e.g. "model.layers.{L}.mlp.experts.{E}.down_proj.weight"
  WeightStorage storage = WeightStorage::kPlain;
  std::vector<DType> also_accepted;  // other dtypes publishers store it in (F32 routers, ...)
  ShardSpec shard;
  WeightSlot slot = WeightSlot::kNone;
  TensorRole scaled_role = TensorRole::kQuantScale;  // for quant scales: the role of the scaled weight
  bool mtp = false;  // part of a multi-token-prediction layer: verified, not counted, not decoded

  bool accepts(DType found) const;
};

struct TensorManifest {
  std::vector<TensorSpec> tensors;
  // Tensors a transformers save writes but the model never reads (WeightTableBuilder::add_unused):
  // accepted by verify when present, never required, counted, bound or synthesised.
  std::vector<TensorSpec> unused;
  // Name prefixes transformers ignores on load (_keys_to_ignore_on_load_unexpected, e.g. "mtp."):
  // verify accepts such tensors without a shape to check.
  std::vector<std::string> ignored_prefixes;
  // Other names a checkpoint may hold the tensors under (stored_layout.h): an image-text save's other
  // prefix (transformers 5.24 writes Kimi K2.5's text layers as language_model.model.blocks.N, the
  // release ...layers.N), a release's own names that transformers converts on load (exaone's
  // transformer.h.N, sarvam_moe's fused attention.query_key_value).
  std::vector<StoredLayout> stored_layouts;
};

// The stored layout a checkpoint uses (`stored`: does it hold this name?): the first of
// manifest.stored_layouts whose first moved tensor the checkpoint holds under its stored name and not
// under the table's; null when it holds the table's own names.
const StoredLayout* stored_layout_in_use(const TensorManifest& manifest,
                                         const std::function<bool(const std::string&)>& stored);
// The layout the family's releases ship (StoredLayout::release), or null.
const StoredLayout* release_layout(const TensorManifest& manifest);
// Where each tensor (and unused tensor) of `manifest` lives under `layout`, by the table's name.
std::map<std::string, StoredLocation> stored_locations(const TensorManifest& manifest,
                                                       const StoredLayout& layout);
// `manifest` under `layout`'s names: every tensor renamed, each fused group one tensor of its parts' rows
// stacked (at the first part's place, bound to no slot). What verify, synth and the golden checks compare
// with a checkpoint; the binder keeps the table's names and reads through a view instead.
TensorManifest to_stored_layout(const TensorManifest& manifest, const StoredLayout& layout);
// Replaces `manifest` by its form under the layout the checkpoint uses (stored_layout_in_use), if any.
void adopt_stored_layout(TensorManifest& manifest, const std::function<bool(const std::string&)>& stored);

// Every tensor of the model in checkpoint order: embedding, then per layer input norm, attention,
// post-attention norm and FFN, then the final norm and lm_head (absent when tied), then the
// multi-token-prediction layers the config declares (spec.n_mtp_layers, stored as
// model.layers.{n_layers}... or in a module of their own such as mtp.*; marked `mtp`). FP8 block checkpoints
// list each quantized weight followed by its F32 `weight_scale_inv`; MXFP4 checkpoints list `*_blocks` /
// `*_scales` (U8) beside BF16 biases. Fails (never wraps) when a size product overflows or the tensor count
// is unreasonably large.
Result<TensorManifest> build_tensor_manifest(const ModelSpec& spec);

// The kind of the multi-token-prediction layers' decoder layer: the last decoder layer's, except that a
// compressed-KV model's (DeepSeek-V4: the release's compress_ratios[num_hidden_layers] is 0 and its index is
// past num_hash_layers) attends to its window of raw keys only and routes by its learned router. One
// source for the weight table and the engine that runs the layer.
LayerSpec mtp_layer_spec(const ModelSpec& spec);

// Name prefix of the decoder ("model." or "language_model.model." for image-text wrappers).
std::string decoder_prefix(const ModelSpec& spec);

}  // namespace day0
