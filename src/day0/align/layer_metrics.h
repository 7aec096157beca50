#pragma once
// Layer-by-layer comparison of hidden states with the columns Ascend's msprobe reports (Cosine,
// EucDist, MaxAbsErr, MaxRelativeErr, shares of elements within 0.1% and 0.5% relative error) and its
// default pass rule, so that the first layer where the error jumps is named.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/align/float_matrix.h"

namespace day0 {

struct TensorCompare {
  double cosine = 1;
  double euclidean = 0;  // ||a - b||_2
  double max_abs_err = 0;
  double max_rel_err = 0;  // max |a - b| / (|b| + eps), b the reference
  double within_0p1 = 1;   // share of elements with relative error <= 0.001
  double within_0p5 = 1;   // share with relative error <= 0.005
  int64_t elements = 0;
  bool finite = true;  // no NaN / Inf in the engine tensor
};

TensorCompare compare_tensors(const FloatMatrix& ref, const FloatMatrix& engine);

// The pass rule (defaults: Ascend msprobe): a layer fails if
//   (cosine < cosine_warn and max_abs_err > abs_floor) or cosine < cosine_fail or max_abs_err > abs_fail,
// or the engine produced a non-finite value.
struct LayerRule {
  double cosine_warn = 0.99;
  double abs_floor = 0.001;
  double cosine_fail = 0.9;
  double abs_fail = 1.0;
};

bool layer_passes(const TensorCompare& c, const LayerRule& rule);

struct LayerRow {
  std::string name;  // "layer 3", "final_norm", "logits"
  int64_t layer = -1;
  TensorCompare compare;
  bool pass = true;
};

struct LayerReport {
  std::vector<LayerRow> rows;
  int64_t first_failing = -1;  // index into rows, -1 when every row passes
  std::string first_failing_name() const {
    return first_failing < 0 ? std::string() : rows[static_cast<size_t>(first_failing)].name;
  }
};

// Adds a row, merging the statistics of several prompts into one row per name: call once per
// prompt and layer; rows keep the order of first insertion.
class LayerAccumulator {
 public:
  explicit LayerAccumulator(LayerRule rule) : rule_(rule) {}
  void add(const std::string& name, int64_t layer, const FloatMatrix& ref, const FloatMatrix& engine);
  LayerReport report() const;

 private:
  struct Sums {
    std::string name;
    int64_t layer = -1;
    double dot = 0, nr = 0, ne = 0, diff2 = 0, max_abs = 0, max_rel = 0;
    int64_t n = 0, n_0p1 = 0, n_0p5 = 0;
    bool finite = true;
  };
  LayerRule rule_;
  std::vector<Sums> sums_;
};

}  // namespace day0
