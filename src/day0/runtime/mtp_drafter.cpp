#include "day0/runtime/mtp_drafter.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace day0 {

MtpDrafter::MtpDrafter(Engine& target) : target_(target), cache_(target.new_mtp_cache(0)) {}

void MtpDrafter::observe_target(ConstMatrix hidden, int64_t first) {
  const int64_t width = target_.residual_width();
  D0_CHECK_MSG(hidden.cols == width, "MTP drafts: target hidden states of another width");
  if (first == 0) {  // a new sequence
    fed_ = 0;
    pending_.clear();
    blind_ = false;
    (void)cache_.truncate(0);
  }
  if (blind_) return;
  // Rows before fed_ are in the MTP cache already: a scheduler that went back to a checkpoint feeds the
  // accepted tokens again, and their hidden states are the ones fed before.
  const int64_t skip = std::clamp<int64_t>(fed_ - first, 0, hidden.rows);
  hidden = hidden.row_slice(skip, hidden.rows - skip);
  first += skip;
  if (hidden.rows == 0) return;
  // Rows at and past `first` held from an earlier step belong to rejected drafts: these replace them.
  const int64_t held = fed_ + static_cast<int64_t>(pending_.size()) / width;
  if (first > held) {
    // Positions [held, first) were computed without this drafter (a server's prefix-cache hit): their
    // hidden states are gone, and the MTP layer needs a row at every position.
    blind_ = true;
    pending_.clear();
    return;
  }
  D0_CHECK_MSG(first >= fed_ && first <= held, "MTP drafts: target hidden states out of order");
  pending_.resize(static_cast<size_t>((first - fed_) * width));
  for (int64_t r = 0; r < hidden.rows; ++r)
    pending_.insert(pending_.end(), hidden.row(r), hidden.row(r) + width);
}

Result<std::vector<int32_t>> MtpDrafter::propose(std::span<const int32_t> history, int64_t k) {
  std::vector<int32_t> drafts;
  const int64_t width = target_.residual_width();
  // The target holds positions [0, kept): each MTP row t < kept pairs h_t with x_{t + 1} = history[t + 1].
  const auto kept = static_cast<int64_t>(history.size()) - 1;
  const int64_t rows = kept - fed_;
  if (k <= 0 || rows <= 0 || blind_) return drafts;
  if (static_cast<int64_t>(pending_.size()) < rows * width) {
    return internal_error(
        fmt::format("MTP drafts: the target's hidden states of positions [{}, {}) are missing", fed_, kept));
  }
  D0_CHECK_MSG(cache_.length() == fed_, "MTP drafts: the MTP cache holds rows past the target's");
  ForwardCapture capture{.want_last_hidden = true};
  const SamplingParams greedy;
  std::vector<int32_t> tokens(history.begin() + fed_ + 1, history.end());  // x_{t + 1} of rows [fed_, kept)
  ConstMatrix hidden(pending_.data(), rows, width);                        // h_t of the same rows
  std::vector<float> chained;                                              // [width] a chained draft's h
  // The chained drafts' rows go to a fork of the cache, dropped on return: cache_ keeps the target's rows
  // only, with no rows to cut back (a sliding window may already have let go of the keys a cut needs).
  std::optional<KvCache> chain;
  KvCache* cache = &cache_;
  for (int64_t i = 0; i < k; ++i) {
    const SequenceStep step{cache, tokens};
    D0_ASSIGN_OR_RETURN(ConstMatrix logits,
                        target_.forward_mtp(0, std::span(&step, 1), hidden, true, &capture));  // [1, vocab]
    if (i == 0) {  // the target's rows are in: what stays in the cache from now on
      fed_ = kept;
      pending_.clear();
      if (k > 1) cache = &chain.emplace(cache_.fork());
    }
    drafts.push_back(pick_token(target_.backend(), logits.row_span(0), greedy, 0));
    // Chained: the MTP layer's own output at the last row stands for the target's hidden state there.
    const std::span<const float> last = capture.last_hidden.row(capture.last_hidden.rows - 1);
    chained.assign(last.begin(), last.end());
    hidden = ConstMatrix(chained.data(), 1, width);
    tokens.assign(1, drafts.back());
  }
  return drafts;
}

}  // namespace day0
