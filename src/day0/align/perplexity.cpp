#include "day0/align/perplexity.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/core/error.h"

namespace day0 {
namespace {

constexpr char kKldMagic[8] = {'D', 'A', 'Y', '0', 'K', 'L', 'D', '1'};
constexpr uint64_t kKldHeaderBytes = 8 + 3 * 4;
constexpr int64_t kMaxVocab = 16'000'000;

int64_t scored_per_window(int64_t context) {
  return context - context / 2 - 1;
}

// Mean and the standard error of the mean from running sums (sample variance, n - 1).
std::pair<double, double> mean_and_stderr(double sum, double sum2, int64_t n) {
  if (n <= 0) return {0.0, 0.0};
  const double mean = sum / static_cast<double>(n);
  if (n < 2) return {mean, 0.0};
  const double var = std::max(0.0, sum2 / static_cast<double>(n) - mean * mean);
  return {mean, std::sqrt(var / static_cast<double>(n - 1))};
}

// Linear interpolation between sorted values at fraction * (n - 1).
double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  const double pos = fraction * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double t = pos - static_cast<double>(lo);
  return (1.0 - t) * sorted[lo] + t * sorted[hi];
}

double median(const std::vector<double>& sorted) {
  if (sorted.empty()) return 0.0;
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

}  // namespace

void log_softmax(std::span<const float> logits, std::span<float> out) {
  D0_CHECK(logits.size() == out.size() && !logits.empty());
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = std::log(sum) + max;
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_z);
}

std::vector<int32_t> perplexity_window_tokens(std::span<const int32_t> tokens, int64_t context) {
  if (context <= 0) return {};
  const auto n_windows = static_cast<int64_t>(tokens.size()) / context;
  return {tokens.begin(), tokens.begin() + n_windows * context};
}

Result<PerplexityResult> compute_perplexity(Engine& engine, std::span<const int32_t> tokens,
                                            const PerplexityOptions& options, const ScoredLogitsSink& sink) {
  const int64_t context = options.context;
  if (context < 4) return invalid_argument(fmt::format("--context {}: expected at least 4", context));
  if (options.batch < 1)
    return invalid_argument(fmt::format("--batch {}: expected at least 1", options.batch));
  if (static_cast<int64_t>(tokens.size()) < 2 * context) {
    return invalid_argument(
        fmt::format("the text has {} tokens; perplexity with a context of {} needs at least {} (two windows)",
                    tokens.size(), context, 2 * context));
  }
  PerplexityResult r;
  r.context = context;
  r.n_windows = static_cast<int64_t>(tokens.size()) / context;
  const int64_t first = context / 2;
  const int64_t vocab = engine.spec().vocab_size;
  double nll_sum = 0, nll_sum2 = 0;
  std::vector<float> logp(static_cast<size_t>(vocab));
  std::vector<int32_t> window(static_cast<size_t>(context));
  for (int64_t w = 0; w < r.n_windows; ++w) {
    std::copy_n(tokens.begin() + w * context, context, window.begin());
    if (options.bos_id >= 0) window[0] = options.bos_id;
    KvCache cache = engine.new_cache();
    // Rows for positions first .. context - 2: they predict the scored tokens.
    FloatMatrix scored(context - 1 - first, vocab);
    for (int64_t start = 0; start < context; start += options.batch) {
      const int64_t n = std::min(options.batch, context - start);
      SequenceStep step{&cache, std::span<const int32_t>(window.data() + start, static_cast<size_t>(n))};
      // [n, vocab], valid until the next forward call
      D0_ASSIGN_OR_RETURN(ConstMatrix logits, engine.forward(std::span<const SequenceStep>(&step, 1)));
      D0_CHECK(logits.rows == n && logits.cols == vocab);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = start + i;
        if (pos < first || pos > context - 2) continue;
        std::copy_n(logits.row(i), vocab, scored.row(pos - first).begin());
      }
    }
    for (int64_t k = 0; k < scored.rows; ++k) {
      const int32_t target = tokens[static_cast<size_t>(w * context + first + k + 1)];
      D0_CHECK(target >= 0 && target < vocab);
      log_softmax(scored.row(k), logp);
      const double nll = -static_cast<double>(logp[static_cast<size_t>(target)]);
      nll_sum += nll;
      nll_sum2 += nll * nll;
      ++r.n_scored;
      if (sink) D0_RETURN_IF_ERROR(sink(scored.row(k), target));
    }
    r.window_ppl.push_back(std::exp(nll_sum / static_cast<double>(r.n_scored)));
    if (options.on_window) options.on_window(w + 1, r.n_windows);
  }
  const auto [mean, err] = mean_and_stderr(nll_sum, nll_sum2, r.n_scored);
  r.nll_mean = mean;
  r.ppl = std::exp(mean);
  r.ppl_stderr = err * r.ppl;
  return r;
}

// ---- .kld files ----

Result<std::unique_ptr<KldWriter>> KldWriter::create(const std::string& path, int64_t n_vocab,
                                                     int64_t context,
                                                     std::span<const int32_t> window_tokens) {
  if (n_vocab <= 0 || n_vocab > kMaxVocab || context < 4 || window_tokens.size() % context != 0) {
    return invalid_argument(fmt::format("{}: bad .kld shape (vocab {}, context {})", path, n_vocab, context));
  }
  std::unique_ptr<KldWriter> w(new KldWriter());
  w->path_ = path;
  w->tmp_path_ = fmt::format("{}.tmp-{}", path, ::getpid());
  w->n_vocab_ = n_vocab;
  const auto n_windows = static_cast<int64_t>(window_tokens.size()) / context;
  w->expected_rows_ = n_windows * scored_per_window(context);
  w->row_.resize(static_cast<size_t>(n_vocab));
  w->file_ = std::fopen(w->tmp_path_.c_str(), "wb");
  if (w->file_ == nullptr) return io_error(fmt::format("{}: cannot create", w->tmp_path_));
  const uint32_t header[3] = {static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(context),
                              static_cast<uint32_t>(n_windows)};
  bool ok = std::fwrite(kKldMagic, 1, 8, w->file_) == 8 && std::fwrite(header, 4, 3, w->file_) == 3;
  ok = ok && std::fwrite(window_tokens.data(), 4, window_tokens.size(), w->file_) == window_tokens.size();
  if (!ok) return io_error(fmt::format("{}: write failed", w->tmp_path_));
  return w;
}

KldWriter::~KldWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

Status KldWriter::add(std::span<const float> logits) {
  if (static_cast<int64_t>(logits.size()) != n_vocab_ || rows_ >= expected_rows_) {
    return internal_error(fmt::format("{}: unexpected row {} of {} values", path_, rows_, logits.size()));
  }
  log_softmax(logits, row_);
  if (std::fwrite(row_.data(), 4, row_.size(), file_) != row_.size()) {
    return io_error(fmt::format("{}: write failed", tmp_path_));
  }
  ++rows_;
  return Status::ok();
}

Status KldWriter::finish() {
  if (rows_ != expected_rows_) {
    return internal_error(fmt::format("{}: {} rows written, {} expected", path_, rows_, expected_rows_));
  }
  const bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok || std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_path_.c_str());
    return io_error(fmt::format("{}: cannot write", path_));
  }
  return Status::ok();
}

Result<KldBase> KldBase::open(const std::string& path) {
  KldBase b;
  D0_ASSIGN_OR_RETURN(b.map_, MappedFile::open(path));
  const std::span<const uint8_t> bytes = b.map_.bytes();
  if (bytes.size() < kKldHeaderBytes || std::memcmp(bytes.data(), kKldMagic, 8) != 0) {
    return parse_error(fmt::format("{}: not a day0 .kld file (magic \"DAY0KLD1\" missing)", path));
  }
  uint32_t header[3];
  std::memcpy(header, bytes.data() + 8, sizeof header);
  b.n_vocab_ = header[0];
  b.context_ = header[1];
  b.n_windows_ = header[2];
  if (b.n_vocab_ == 0 || b.n_vocab_ > kMaxVocab || b.context_ < 4 || b.n_windows_ == 0) {
    return parse_error(fmt::format("{}: implausible header (vocab {}, context {}, windows {})", path,
                                   b.n_vocab_, b.context_, b.n_windows_));
  }
  b.n_rows_ = b.n_windows_ * scored_per_window(b.context_);
  const auto token_bytes = checked_mul(static_cast<uint64_t>(b.n_windows_ * b.context_), uint64_t{4});
  const auto row_values = checked_mul(static_cast<uint64_t>(b.n_rows_), static_cast<uint64_t>(b.n_vocab_));
  const auto row_bytes = row_values ? checked_mul(*row_values, uint64_t{4}) : std::nullopt;
  const auto body = token_bytes && row_bytes ? checked_add(*token_bytes, *row_bytes) : std::nullopt;
  const auto total = body ? checked_add(*body, kKldHeaderBytes) : std::nullopt;
  if (!total || *total != bytes.size()) {
    return data_loss(
        fmt::format("{}: the header (vocab {}, context {}, windows {}) implies {} bytes, the file has {}",
                    path, b.n_vocab_, b.context_, b.n_windows_, total.value_or(0), bytes.size()));
  }
  return b;
}

std::span<const int32_t> KldBase::tokens() const {
  return {reinterpret_cast<const int32_t*>(map_.bytes().data() + kKldHeaderBytes),
          static_cast<size_t>(n_windows_ * context_)};
}

std::span<const float> KldBase::row(int64_t i) const {
  D0_CHECK(i >= 0 && i < n_rows_);
  const uint64_t offset = kKldHeaderBytes + static_cast<uint64_t>(n_windows_ * context_) * 4 +
                          static_cast<uint64_t>(i) * static_cast<uint64_t>(n_vocab_) * 4;
  return {reinterpret_cast<const float*>(map_.bytes().data() + offset), static_cast<size_t>(n_vocab_)};
}

Status check_kld_base_matches(const KldBase& base, std::span<const int32_t> window_tokens, int64_t context,
                              int64_t n_vocab) {
  if (base.n_vocab() != n_vocab) {
    return invalid_argument(
        fmt::format("--kl-base: the base has a vocabulary of {}, this model {}", base.n_vocab(), n_vocab));
  }
  if (base.context() != context) {
    return invalid_argument(
        fmt::format("--kl-base: the base ran with --context {}, this run {}", base.context(), context));
  }
  const std::span<const int32_t> theirs = base.tokens();
  if (theirs.size() != window_tokens.size() ||
      !std::equal(theirs.begin(), theirs.end(), window_tokens.begin())) {
    return invalid_argument("--kl-base: the base was run on different tokens (another text or tokenizer)");
  }
  return Status::ok();
}

Status KlAccumulator::add(std::span<const float> logits, int32_t target) {
  if (row_ >= base_.n_rows() || static_cast<int64_t>(logits.size()) != base_.n_vocab()) {
    return invalid_argument(fmt::format("--kl-base: row {} does not match the base ({} rows of {})", row_,
                                        base_.n_rows(), base_.n_vocab()));
  }
  const std::span<const float> base = base_.row(row_++);
  logp_.resize(logits.size());
  log_softmax(logits, logp_);
  double kld = 0;
  size_t top_base = 0, top_this = 0;
  for (size_t i = 0; i < logp_.size(); ++i) {
    const double pb = std::exp(static_cast<double>(base[i]));
    kld += pb * (static_cast<double>(base[i]) - static_cast<double>(logp_[i]));
    if (base[i] > base[top_base]) top_base = i;
    if (logp_[i] > logp_[top_this]) top_this = i;
  }
  const auto t = static_cast<size_t>(target);
  kld_.push_back(kld);
  dp_.push_back(std::exp(static_cast<double>(logp_[t])) - std::exp(static_cast<double>(base[t])));
  base_nll_.push_back(-static_cast<double>(base[t]));
  same_top_ += top_base == top_this ? 1 : 0;
  return Status::ok();
}

KlSummary KlAccumulator::summary() const {
  KlSummary s;
  s.count = static_cast<int64_t>(kld_.size());
  if (s.count == 0) return s;
  double k1 = 0, k2 = 0, d1 = 0, d2 = 0, n1 = 0, n2 = 0;
  for (size_t i = 0; i < kld_.size(); ++i) {
    k1 += kld_[i];
    k2 += kld_[i] * kld_[i];
    d1 += dp_[i];
    d2 += dp_[i] * dp_[i];
    n1 += base_nll_[i];
    n2 += base_nll_[i] * base_nll_[i];
  }
  std::tie(s.kld_mean, s.kld_stderr) = mean_and_stderr(k1, k2, s.count);
  std::tie(s.dp_mean, s.dp_stderr) = mean_and_stderr(d1, d2, s.count);
  s.dp_rms = std::sqrt(d2 / static_cast<double>(s.count));
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  s.kld_median = median(sorted);
  s.kld_p99 = percentile(sorted, 0.99);
  s.kld_max = sorted.back();
  s.top1_agreement = static_cast<double>(same_top_) / static_cast<double>(s.count);
  if (s.count > 1) {
    s.top1_stderr = std::sqrt(s.top1_agreement * (1.0 - s.top1_agreement) / static_cast<double>(s.count - 1));
  }
  const auto [nll_mean, nll_err] = mean_and_stderr(n1, n2, s.count);
  s.ppl_base = std::exp(nll_mean);
  s.ppl_base_stderr = nll_err * s.ppl_base;
  return s;
}

}  // namespace day0
