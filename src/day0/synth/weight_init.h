#pragma once
// Deterministic random weights for synthetic checkpoints. Each tensor draws from its own stream,
// seeded by (seed, tensor name), so values do not depend on tensor order or shard layout.
// Scales keep activations realistic: N(0, std^2) for matrices and biases, 1 for norm weights.
#include <cstdint>
#include <string>
#include <vector>

namespace day0 {

// splitmix64 stream with Box-Muller normals: portable, unlike std::normal_distribution.
class WeightRng {
 public:
  WeightRng(uint64_t seed, const std::string& stream_name);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  float normal(float mean, float stddev);

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// n values N(0, stddev^2) from the stream (seed, name).
std::vector<float> normal_values(uint64_t seed, const std::string& name, size_t n, float stddev);

}  // namespace day0
