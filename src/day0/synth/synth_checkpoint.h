#pragma once
// Writes a synthetic Hugging Face checkpoint for a ModelSpec: config.json, shards of random weights in
// the release's storage format (BF16, FP8 E4M3 with 128x128 block scales, MXFP4 experts), the index
// and SHA256SUMS. Everything is written into a temporary sibling directory that is renamed to the
// target at the end: the target either holds a complete checkpoint or does not exist.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/model/tensor_manifest.h"
#include "day0/synth/miniature.h"

namespace day0 {

struct SynthOptions {
  uint64_t seed = 0;
  int n_shards = 3;        // target shard count (the index is written even for one)
  bool mtp_layers = true;  // write the release's multi-token-prediction layers (spec.n_mtp_layers)
  float init_std = 0.02f;  // N(0, std^2) for matrices and biases; norms are 1
};

struct SynthResult {
  ModelSpec spec;
  std::string dir;
  std::vector<std::string> shards;
  int64_t n_tensors = 0;
  int64_t n_mtp_tensors = 0;
  uint64_t tensor_bytes = 0;
  int64_t params = 0;  // logical parameters of the main model (manifest)
};

// The tensors written for `spec`: the manifest, plus MTP layer tensors when requested (stored as
// model.layers.{n_layers + k}.*, as the releases do).
Result<TensorManifest> synth_tensor_list(const ModelSpec& spec, bool mtp_layers);

// `out_dir` must not exist, or be an empty directory; its parent must exist.
Result<SynthResult> write_synthetic_checkpoint(const ModelSpec& spec, const SynthOptions& options,
                                               const std::string& out_dir);

// make_miniature_spec + write_synthetic_checkpoint.
Result<SynthResult> synthesize_miniature(const ModelSpec& full, const MiniatureOptions& dims,
                                         const SynthOptions& options, const std::string& out_dir);

}  // namespace day0
