#include "day0/align/layer_metrics.h"

#include <algorithm>
#include <cmath>

#include "day0/align/logit_metrics.h"
#include "day0/core/error.h"

namespace day0 {
namespace {

TensorCompare finish(double dot, double nr, double ne, double diff2, double max_abs, double max_rel,
                     int64_t n, int64_t n_0p1, int64_t n_0p5, bool finite) {
  TensorCompare c;
  c.elements = n;
  c.finite = finite;
  if (nr > 0 && ne > 0) {
    c.cosine = dot / std::sqrt(nr * ne);
  } else {
    c.cosine = (nr == 0 && ne == 0) ? 1.0 : 0.0;
  }
  if (!finite) c.cosine = 0;
  c.euclidean = std::sqrt(diff2);
  c.max_abs_err = max_abs;
  c.max_rel_err = max_rel;
  if (n > 0) {
    c.within_0p1 = static_cast<double>(n_0p1) / static_cast<double>(n);
    c.within_0p5 = static_cast<double>(n_0p5) / static_cast<double>(n);
  }
  return c;
}

}  // namespace

TensorCompare compare_tensors(const FloatMatrix& ref, const FloatMatrix& engine) {
  LayerAccumulator acc{LayerRule{}};
  acc.add("t", 0, ref, engine);
  return acc.report().rows.front().compare;
}

bool layer_passes(const TensorCompare& c, const LayerRule& rule) {
  if (!c.finite) return false;
  if (c.cosine < rule.cosine_warn && c.max_abs_err > rule.abs_floor) return false;
  if (c.cosine < rule.cosine_fail) return false;
  if (c.max_abs_err > rule.abs_fail) return false;
  return true;
}

void LayerAccumulator::add(const std::string& name, int64_t layer, const FloatMatrix& ref,
                           const FloatMatrix& engine) {
  D0_CHECK_MSG(ref.same_shape(engine), "compared tensors differ in shape: " + name);
  auto it = std::find_if(sums_.begin(), sums_.end(), [&](const Sums& s) { return s.name == name; });
  if (it == sums_.end()) {
    sums_.push_back(Sums{name, layer});
    it = sums_.end() - 1;
  }
  Sums& s = *it;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    const double r = ref.data[i], e = engine.data[i];
    if (!std::isfinite(e)) {
      s.finite = false;
      continue;
    }
    const double d = std::fabs(r - e);
    const double rel = d / (std::fabs(r) + kRelativeErrorFloor);
    s.dot += r * e;
    s.nr += r * r;
    s.ne += e * e;
    s.diff2 += d * d;
    s.max_abs = std::max(s.max_abs, d);
    s.max_rel = std::max(s.max_rel, rel);
    s.n_0p1 += rel <= 0.001 ? 1 : 0;
    s.n_0p5 += rel <= 0.005 ? 1 : 0;
  }
  s.n += static_cast<int64_t>(ref.data.size());
}

LayerReport LayerAccumulator::report() const {
  LayerReport r;
  for (const auto& s : sums_) {
    LayerRow row;
    row.name = s.name;
    row.layer = s.layer;
    row.compare = finish(s.dot, s.nr, s.ne, s.diff2, s.max_abs, s.max_rel, s.n, s.n_0p1, s.n_0p5, s.finite);
    row.pass = layer_passes(row.compare, rule_);
    if (!row.pass && r.first_failing < 0) r.first_failing = static_cast<int64_t>(r.rows.size());
    r.rows.push_back(std::move(row));
  }
  return r;
}

}  // namespace day0
