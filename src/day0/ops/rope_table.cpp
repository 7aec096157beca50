#include "day0/ops/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

namespace day0 {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

// 1 / base^(2i / dim) with the exponent from an integer arange converted to float32, as HF does.
std::vector<float> base_inv_freq(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(exponent)));
  }
  return out;
}

void apply_llama3(std::vector<float>& inv, const RopeScaling& s, int64_t max_position) {
  const double original = s.original_max_position > 0 ? static_cast<double>(s.original_max_position)
                                                      : static_cast<double>(max_position);
  const double low_wavelen = original / s.low_freq_factor;
  const double high_wavelen = original / s.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / s.factor);
      continue;
    }
    const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = static_cast<float>((1.0 - smooth) * f / s.factor + smooth * f);
  }
}

float apply_yarn(std::vector<float>& inv, double base, int64_t dim, const RopeScaling& s,
                 int64_t max_position) {
  const double original = s.original_max_position > 0 ? static_cast<double>(s.original_max_position)
                                                      : static_cast<double>(max_position);
  const double factor = s.factor > 0 ? s.factor : static_cast<double>(max_position) / original;
  double attention_factor;
  if (s.attention_factor) {
    attention_factor = *s.attention_factor;
  } else if (s.mscale != 0.0 && s.mscale_all_dim != 0.0) {
    attention_factor = yarn_get_mscale(factor, s.mscale) / yarn_get_mscale(factor, s.mscale_all_dim);
  } else {
    attention_factor = yarn_get_mscale(factor);
  }
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(base));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = inv[i];
    const double interpolation = inv[i] / factor;
    // ramp 0 (fast dims) keeps the original frequency.
    inv[i] = static_cast<float>((1.0 - ramp) * extrapolation + ramp * interpolation);
  }
  return static_cast<float>(attention_factor);
}

}  // namespace

Result<RopeFrequencies> rope_frequencies(double theta, int64_t rotary_dim, const RopeScaling& scaling,
                                         int64_t max_position, int64_t seq_len) {
  if (!(theta > 0.0)) return invalid_argument(fmt::format("rope_theta: expected > 0, found {}", theta));
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) {
    return invalid_argument(fmt::format("rotary dim: expected a positive even number, found {}", rotary_dim));
  }
  const bool scaled = scaling.type == RopeType::kLinear || scaling.type == RopeType::kDynamic ||
                      scaling.type == RopeType::kLlama3 || scaling.type == RopeType::kYarn ||
                      scaling.type == RopeType::kProportional;
  if (scaled && !(scaling.factor > 0.0)) {
    return invalid_argument(fmt::format("rope_scaling.factor: expected > 0, found {}", scaling.factor));
  }
  RopeFrequencies out;
  switch (scaling.type) {
    case RopeType::kNone:
    case RopeType::kDefault:
      out.inv_freq = base_inv_freq(theta, rotary_dim);
      break;
    case RopeType::kLinear:
      out.inv_freq = base_inv_freq(theta, rotary_dim);
      for (float& f : out.inv_freq) f = static_cast<float>(f / scaling.factor);
      break;
    case RopeType::kDynamic: {
      double base = theta;
      if (max_position > 0 && seq_len > max_position) {
        const double ratio =
            scaling.factor * static_cast<double>(seq_len) / static_cast<double>(max_position) -
            (scaling.factor - 1.0);
        base = theta * std::pow(ratio, static_cast<double>(rotary_dim) / static_cast<double>(rotary_dim - 2));
      }
      out.inv_freq = base_inv_freq(base, rotary_dim);
      break;
    }
    case RopeType::kLlama3:
      if (scaling.high_freq_factor == scaling.low_freq_factor) {
        return invalid_argument("rope_scaling: llama3 needs high_freq_factor != low_freq_factor");
      }
      out.inv_freq = base_inv_freq(theta, rotary_dim);
      apply_llama3(out.inv_freq, scaling, max_position);
      break;
    case RopeType::kYarn:
      out.inv_freq = base_inv_freq(theta, rotary_dim);
      out.attention_factor = apply_yarn(out.inv_freq, theta, rotary_dim, scaling, max_position);
      break;
    case RopeType::kProportional: {
      // transformers' int(share * head_dim // 2) rotated frequencies, the rest 0 (those pairs pass through).
      if (!(scaling.proportional_share > 0.0 && scaling.proportional_share <= 1.0)) {
        return invalid_argument(fmt::format("proportional RoPE: partial_rotary_factor {} outside (0, 1]",
                                            scaling.proportional_share));
      }
      const auto rotated =
          static_cast<size_t>(std::floor(scaling.proportional_share * static_cast<double>(rotary_dim) / 2.0));
      out.inv_freq = base_inv_freq(theta, rotary_dim);
      for (size_t i = 0; i < out.inv_freq.size(); ++i) {
        out.inv_freq[i] = i < rotated ? static_cast<float>(out.inv_freq[i] / scaling.factor) : 0.0f;
      }
      break;
    }
  }
  return out;
}

}  // namespace day0
