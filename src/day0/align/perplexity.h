#pragma once
// Perplexity over a token stream and KL divergence against a saved base run, with the protocol
// llama.cpp's llama-perplexity uses, so that figures compare with its:
//  - the tokens are cut into non-overlapping windows of `context` tokens (a partial last window is
//    dropped; at least two windows are needed); each window starts from an empty KV cache and, when the
//    tokenizer adds BOS, its first token is replaced by BOS;
//  - only the second half of each window is scored: the logits at positions context/2 .. context-2
//    predict the tokens at context/2+1 .. context-1 (context - context/2 - 1 tokens per window);
//  - PPL = exp(mean NLL), reported ± exp(mean) * the standard error of the NLL mean.
// Against a base run (a .kld file with the base's log-probabilities at every scored position), each
// scored token gives KL(base || this), Δp = p_this(target) - p_base(target), and whether the two
// arg-maxes agree; the summary is the mean ± standard error, median, 99th percentile and maximum of the
// KLD (percentiles interpolated between sorted values), mean ± standard error and RMS of Δp, and the
// top-1 agreement ± its binomial standard error.
//
// The .kld file (little-endian), written by KldWriter and read back with every size checked:
//   8 bytes   magic "DAY0KLD1"
//   u32       n_vocab, u32 context, u32 n_windows
//   i32       tokens[n_windows * context]
//   f32       log_probs[n_windows * (context - context/2 - 1) * n_vocab]  (log-softmax, scored positions
//             in order)
// The file size must be exactly this.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/io/mapped_file.h"
#include "day0/runtime/engine.h"

namespace day0 {

struct PerplexityOptions {
  int64_t context = 512;
  int64_t batch = 512;  // tokens per forward call within a window
  int32_t bos_id = -1;  // >= 0: the first token of each window becomes BOS
  // Called after each window with (windows done, windows total).
  std::function<void(int64_t, int64_t)> on_window;
};

// Receives the logits row of every scored position (rows in order) with the token it predicts.
using ScoredLogitsSink = std::function<Status(std::span<const float> logits, int32_t target)>;

struct PerplexityResult {
  int64_t context = 0;
  int64_t n_windows = 0;
  int64_t n_scored = 0;
  double ppl = 0;
  double ppl_stderr = 0;
  double nll_mean = 0;
  std::vector<double> window_ppl;  // running PPL after each window (llama-perplexity's [i]x.xxxx list)
};

// Windows needed: tokens.size() >= 2 * context. kInvalidArgument otherwise (or for a bad context/batch).
Result<PerplexityResult> compute_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                            const PerplexityOptions& options,
                                            const ScoredLogitsSink& sink = {});

// log-softmax of one logits row (double accumulation).
void log_softmax(std::span<const float> logits, std::span<float> out);

// Writes a .kld file as scored rows arrive (streamed; nothing held but one row).
class KldWriter {
 public:
  static Result<std::unique_ptr<KldWriter>> create(const std::string& path, int64_t n_vocab, int64_t context,
                                                   std::span<const int32_t> window_tokens);
  ~KldWriter();
  Status add(std::span<const float> logits);
  // Checks the row count and renames the temporary file into place.
  Status finish();

 private:
  KldWriter() = default;
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  int64_t n_vocab_ = 0;
  int64_t expected_rows_ = 0;
  int64_t rows_ = 0;
  std::vector<float> row_;
};

// A base run read back from a .kld file (memory-mapped, sizes checked).
class KldBase {
 public:
  static Result<KldBase> open(const std::string& path);
  int64_t n_vocab() const { return n_vocab_; }
  int64_t context() const { return context_; }
  int64_t n_windows() const { return n_windows_; }
  int64_t n_rows() const { return n_rows_; }
  std::span<const int32_t> tokens() const;
  std::span<const float> row(int64_t i) const;  // log-probs of scored row i

 private:
  MappedFile map_;
  int64_t n_vocab_ = 0, context_ = 0, n_windows_ = 0, n_rows_ = 0;
};

struct KlSummary {
  int64_t count = 0;
  double kld_mean = 0, kld_stderr = 0, kld_median = 0, kld_p99 = 0, kld_max = 0;
  double dp_mean = 0, dp_stderr = 0, dp_rms = 0;
  double top1_agreement = 0, top1_stderr = 0;
  double ppl_base = 0, ppl_base_stderr = 0;
};

// Accumulates per-token statistics against a base run; feed it the scored rows in order.
class KlAccumulator {
 public:
  explicit KlAccumulator(const KldBase& base) : base_(base) {}
  Status add(std::span<const float> logits, int32_t target);
  KlSummary summary() const;

 private:
  const KldBase& base_;
  int64_t row_ = 0;
  std::vector<float> logp_;
  std::vector<double> kld_, dp_;
  std::vector<double> base_nll_;
  int64_t same_top_ = 0;
};

// The windows' tokens a run over `tokens` evaluates (before any BOS replacement): the first
// floor(size / context) * context tokens.
std::vector<int32_t> perplexity_window_tokens(std::span<const int32_t> tokens, int64_t context);
// Checks that a base run was made on the same tokens, context and vocabulary (before running).
Status check_kld_base_matches(const KldBase& base, std::span<const int32_t> window_tokens, int64_t context,
                              int64_t n_vocab);

}  // namespace day0
