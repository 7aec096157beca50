#pragma once
// Logit agreement between a reference and the engine, per position and over a whole set of prompts:
// what llama.cpp's KL-divergence mode and the usual parity checks report.
//   - max abs / max relative error and cosine similarity of the raw logits;
//   - KL(reference || engine) of the softmax distributions, with mean / median / p99 / max;
//   - RMS of delta-p: the change in probability given to the actual next token;
//   - same top-1 share, top-5 overlap (|top5_ref ∩ top5_eng| / 5);
//   - perplexity of the prompts (next-token NLL) under both and their ratio.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/align/float_matrix.h"

namespace day0 {

// Floor of a relative error's denominator: |engine - ref| / (|ref| + kRelativeErrorFloor).
inline constexpr double kRelativeErrorFloor = 1e-12;

struct PositionLogitMetrics {
  double max_abs_err = 0;
  double max_rel_err = 0;
  double cosine = 0;
  double kl = 0;          // KL(ref || engine), nats
  int64_t top1_ref = -1;  // argmax of the reference logits
  int64_t top1_engine = -1;
  double top5_overlap = 0;  // share of the reference top-5 found in the engine's top-5
  bool has_next = false;    // a next token exists (not the last position of the prompt)
  double nll_ref = 0;       // -log p_ref(next token)
  double nll_engine = 0;
  double delta_p = 0;  // p_engine(next) - p_ref(next)
};

// Metrics of one position. Both rows must have the same length (the vocabulary).
// next_token < 0: no next token (the last position).
PositionLogitMetrics compare_logit_row(std::span<const float> ref, std::span<const float> engine,
                                       int64_t next_token);

struct LogitSummary {
  int64_t positions = 0;
  int64_t predicted_positions = 0;  // positions with a next token (used by perplexity / delta-p)
  double max_abs_err = 0;
  double max_rel_err = 0;
  double logit_range = 0;  // max - min of all reference logits: scale for max_abs_err
  double min_cosine = 1;
  double mean_cosine = 1;
  double kl_mean = 0, kl_median = 0, kl_p99 = 0, kl_max = 0;
  double rms_delta_p = 0;
  double same_top1 = 1;     // share of positions whose argmax agrees
  double top5_overlap = 1;  // mean over positions
  double ppl_ref = 0, ppl_engine = 0, ppl_ratio = 1;
  int64_t worst_position = -1;  // position (over the concatenation of prompts) with the largest KL
};

// Accumulates positions of several prompts, then summarises.
class LogitAccumulator {
 public:
  // ref and engine: [T, vocab]; ids: the T prompt tokens (next token of position t is ids[t + 1]).
  void add_prompt(const FloatMatrix& ref, const FloatMatrix& engine, std::span<const int64_t> ids);
  void add_position(const PositionLogitMetrics& m, double ref_min, double ref_max);
  LogitSummary summary() const;
  const std::vector<PositionLogitMetrics>& positions() const { return positions_; }

 private:
  std::vector<PositionLogitMetrics> positions_;
  double ref_min_ = 0, ref_max_ = 0;
  bool seen_ = false;
};

// Linear-interpolated quantile q in [0, 1] of values (copied and sorted); 0 for no values.
double quantile(std::vector<double> values, double q);

// Indices of the n largest values, largest first (ties: lower index first).
std::vector<int64_t> top_n_indices(std::span<const float> values, int64_t n);

}  // namespace day0
