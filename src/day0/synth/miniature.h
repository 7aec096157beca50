#pragma once
// A miniature of a model: the same structure (family, attention kind with MLA ranks, sliding/chunked
// layer pattern, sinks, qk-norm, routing with group-limited top-k, correction bias, shared experts,
// dense-then-MoE layout, routed scaling, RoPE scaling, release weight format) with small dimensions,
// so that a full pipeline runs on one card or a laptop in seconds. Used by `day0 synth` and `adapt`.
#include <cstdint>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

// Zero means "the default"; defaults give a checkpoint of a few MB.
struct MiniatureOptions {
  int64_t layers = 0;               // default 4 (one leading dense layer kept when the model has them)
  int64_t hidden = 0;               // default 64
  int64_t heads = 0;                // default 4
  int64_t head_dim = 0;             // default 16 (GQA)
  int64_t intermediate = 0;         // dense MLP width, default 128
  int64_t experts = 0;              // default 8, 16 for group-limited routing
  int64_t experts_per_token = 0;    // default min(release top-k, experts / 4), at least 1
  int64_t expert_intermediate = 0;  // default 64
  int64_t vocab = 0;                // default 256
  int64_t window = 0;               // cap on sliding window / attention chunk, default 16
  bool release_attention = false;   // keep the release's MLA ranks, head widths and indexer (bench shapes)
};

// The miniature spec, canonical: it is exactly what config.json written from it parses back to.
// Fails with kInvalidArgument on options that break the structure (e.g. MXFP4 needs multiples of 32).
Result<ModelSpec> make_miniature_spec(const ModelSpec& full, const MiniatureOptions& options);

}  // namespace day0
