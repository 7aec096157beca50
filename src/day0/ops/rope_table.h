#pragma once
// RoPE frequencies with the scalings of architectures.md §2.5-2.6: default, linear, dynamic (NTK),
// llama3, yarn. The rope kernel computes theta = position * inv_freq[i] (float32) and multiplies
// cos/sin by attention_factor.
#include <cstdint>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [rotary_dim / 2]
  float attention_factor = 1.0f;  // yarn: scales cos and sin
};

// rotary_dim: D_r = int(head_dim * partial_rotary_factor), even and > 0. max_position: the config's
// max_position_embeddings (M). seq_len: max(position)+1 of the current call, used only by kDynamic
// (frequencies grow when seq_len > M). InvalidArgument for a non-positive theta/dim/factor.
Result<RopeFrequencies> rope_frequencies(double theta, int64_t rotary_dim, const RopeScaling& scaling,
                                         int64_t max_position, int64_t seq_len = 0);

// yarn's get_mscale(s, m): 1 if s <= 1 else 0.1 * m * ln(s) + 1 (used for the MLA softmax scale).
double yarn_get_mscale(double scale, double mscale = 1.0);

}  // namespace day0
