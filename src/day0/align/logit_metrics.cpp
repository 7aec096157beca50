#include "day0/align/logit_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "day0/core/error.h"

namespace day0 {
namespace {

// log-sum-exp in double, shifted by the max so that large logits do not overflow.
double log_sum_exp(std::span<const float> row) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : row) mx = std::max(mx, static_cast<double>(v));
  if (!std::isfinite(mx)) return mx;
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

}  // namespace

std::vector<int64_t> top_n_indices(std::span<const float> values, int64_t n) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto keep = std::min<int64_t>(n, static_cast<int64_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(static_cast<size_t>(keep));
  return idx;
}

PositionLogitMetrics compare_logit_row(std::span<const float> ref, std::span<const float> engine,
                                       int64_t next_token) {
  D0_CHECK_MSG(ref.size() == engine.size(), "logit rows of different lengths");
  D0_CHECK(!ref.empty());
  PositionLogitMetrics m;
  double dot = 0, nr = 0, ne = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], e = engine[i];
    const double d = std::fabs(r - e);
    m.max_abs_err = std::max(m.max_abs_err, d);
    m.max_rel_err = std::max(m.max_rel_err, d / (std::fabs(r) + kRelativeErrorFloor));
    dot += r * e;
    nr += r * r;
    ne += e * e;
  }
  m.cosine = (nr > 0 && ne > 0) ? dot / std::sqrt(nr * ne) : (nr == ne ? 1.0 : 0.0);

  const double lse_r = log_sum_exp(ref), lse_e = log_sum_exp(engine);
  double kl = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double lr = ref[i] - lse_r, le = engine[i] - lse_e;
    const double pr = std::exp(lr);
    if (pr > 0) kl += pr * (lr - le);
  }
  m.kl = std::max(kl, 0.0);  // rounding can give -1e-17

  const auto t5r = top_n_indices(ref, 5), t5e = top_n_indices(engine, 5);
  m.top1_ref = t5r.front();
  m.top1_engine = t5e.front();
  int64_t common = 0;
  for (int64_t a : t5r) common += std::count(t5e.begin(), t5e.end(), a) > 0 ? 1 : 0;
  m.top5_overlap = static_cast<double>(common) / static_cast<double>(t5r.size());

  if (next_token >= 0) {
    D0_CHECK_MSG(next_token < static_cast<int64_t>(ref.size()), "next token outside the vocabulary");
    m.has_next = true;
    m.nll_ref = lse_r - ref[next_token];
    m.nll_engine = lse_e - engine[next_token];
    m.delta_p = std::exp(-m.nll_engine) - std::exp(-m.nll_ref);
  }
  return m;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

void LogitAccumulator::add_position(const PositionLogitMetrics& m, double ref_min, double ref_max) {
  positions_.push_back(m);
  ref_min_ = seen_ ? std::min(ref_min_, ref_min) : ref_min;
  ref_max_ = seen_ ? std::max(ref_max_, ref_max) : ref_max;
  seen_ = true;
}

void LogitAccumulator::add_prompt(const FloatMatrix& ref, const FloatMatrix& engine,
                                  std::span<const int64_t> ids) {
  D0_CHECK_MSG(ref.same_shape(engine), "reference and engine logits differ in shape");
  D0_CHECK_MSG(static_cast<int64_t>(ids.size()) == ref.rows, "one token id per logits row");
  for (int64_t t = 0; t < ref.rows; ++t) {
    const auto r = ref.row(t);
    const auto [mn, mx] = std::minmax_element(r.begin(), r.end());
    const int64_t next = t + 1 < ref.rows ? ids[t + 1] : -1;
    add_position(compare_logit_row(r, engine.row(t), next), *mn, *mx);
  }
}

LogitSummary LogitAccumulator::summary() const {
  LogitSummary s;
  s.positions = static_cast<int64_t>(positions_.size());
  if (positions_.empty()) return s;
  s.logit_range = ref_max_ - ref_min_;
  std::vector<double> kls;
  double cos_sum = 0, top5_sum = 0, dp2 = 0, nll_r = 0, nll_e = 0;
  int64_t same = 0;
  double worst_kl = -1;
  s.min_cosine = 1;
  for (size_t i = 0; i < positions_.size(); ++i) {
    const auto& m = positions_[i];
    s.max_abs_err = std::max(s.max_abs_err, m.max_abs_err);
    s.max_rel_err = std::max(s.max_rel_err, m.max_rel_err);
    s.min_cosine = std::min(s.min_cosine, m.cosine);
    cos_sum += m.cosine;
    top5_sum += m.top5_overlap;
    same += m.top1_ref == m.top1_engine ? 1 : 0;
    kls.push_back(m.kl);
    if (m.kl > worst_kl) {
      worst_kl = m.kl;
      s.worst_position = static_cast<int64_t>(i);
    }
    if (m.has_next) {
      ++s.predicted_positions;
      dp2 += m.delta_p * m.delta_p;
      nll_r += m.nll_ref;
      nll_e += m.nll_engine;
    }
  }
  const auto n = static_cast<double>(positions_.size());
  s.mean_cosine = cos_sum / n;
  s.top5_overlap = top5_sum / n;
  s.same_top1 = static_cast<double>(same) / n;
  s.kl_mean = std::accumulate(kls.begin(), kls.end(), 0.0) / n;
  s.kl_max = *std::max_element(kls.begin(), kls.end());
  s.kl_median = quantile(kls, 0.5);
  s.kl_p99 = quantile(kls, 0.99);
  if (s.predicted_positions > 0) {
    const auto np = static_cast<double>(s.predicted_positions);
    s.rms_delta_p = std::sqrt(dp2 / np);
    s.ppl_ref = std::exp(nll_r / np);
    s.ppl_engine = std::exp(nll_e / np);
    s.ppl_ratio = s.ppl_engine / s.ppl_ref;
  }
  return s;
}

}  // namespace day0
