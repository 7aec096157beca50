#include "day0/synth/weight_init.h"

#include <cmath>

namespace day0 {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

WeightRng::WeightRng(uint64_t seed, const std::string& stream_name)
    : state_(seed * 0x9e3779b97f4a7c15ull ^ fnv1a(stream_name)) {}

uint64_t WeightRng::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double WeightRng::uniform() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

float WeightRng::normal(float mean, float stddev) {
  if (has_spare_) {
    has_spare_ = false;
    return mean + stddev * static_cast<float>(spare_);
  }
  const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  has_spare_ = true;
  return mean + stddev * static_cast<float>(r * std::cos(2.0 * M_PI * u2));
}

std::vector<float> normal_values(uint64_t seed, const std::string& name, size_t n, float stddev) {
  WeightRng rng(seed, name);
  std::vector<float> out(n);
  for (auto& v : out) v = rng.normal(0.0f, stddev);
  return out;
}

}  // namespace day0
