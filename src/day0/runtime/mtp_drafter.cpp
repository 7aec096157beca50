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
  MtpAsk ask{.drafter = this, .history = history, .k = k};
  D0_RETURN_IF_ERROR(mtp_propose_batch(target_, std::span(&ask, 1)));
  D0_RETURN_IF_ERROR(ask.status);
  return std::move(ask.drafts);
}

Status mtp_propose_batch(Engine& target, std::span<MtpAsk> asks) {
  const int64_t width = target.residual_width();
  // A sequence that drafts: its rows' tokens and hidden states for the next call, and its chain's cache.
  struct Drafting {
    MtpAsk* ask;
    int64_t kept;                 // positions the target holds: history.size() - 1
    std::vector<int32_t> tokens;  // x_{t + 1} of its rows in the next call
    std::vector<float> hidden;    // [rows, width] h_t of the same rows
    // The chained drafts' rows go to a fork of the MTP cache, dropped on return: the drafter's cache keeps
    // the target's rows only, with no rows to cut back (a sliding window may already have let go of the
    // keys a cut needs).
    std::optional<KvCache> chain;
  };
  std::vector<Drafting> drafting;
  int64_t depth = 0;
  for (MtpAsk& ask : asks) {
    ask.drafts.clear();
    ask.status = Status::ok();
    MtpDrafter& d = *ask.drafter;
    D0_CHECK_MSG(&d.target_ == &target, "MTP drafts: a drafter of another engine");
    // The target holds positions [0, kept): each MTP row t < kept pairs h_t with x_{t + 1} = history[t + 1].
    const auto kept = static_cast<int64_t>(ask.history.size()) - 1;
    const int64_t rows = kept - d.fed_;
    if (ask.k <= 0 || rows <= 0 || d.blind_) continue;
    if (static_cast<int64_t>(d.pending_.size()) < rows * width) {
      ask.status = internal_error(fmt::format(
          "MTP drafts: the target's hidden states of positions [{}, {}) are missing", d.fed_, kept));
      continue;
    }
    D0_CHECK_MSG(d.cache_.length() == d.fed_, "MTP drafts: the MTP cache holds rows past the target's");
    drafting.push_back({.ask = &ask,
                        .kept = kept,
                        .tokens = std::vector<int32_t>(ask.history.begin() + d.fed_ + 1, ask.history.end()),
                        .hidden = std::vector<float>(d.pending_.begin(), d.pending_.begin() + rows * width),
                        .chain = std::nullopt});
    depth = std::max(depth, ask.k);
  }
  if (drafting.empty()) return Status::ok();
  // Row-invariant calls: a row's logits do not depend on how many rows, of which sequences, share the call.
  struct RowInvariance {
    Engine& engine;
    bool before;
    ~RowInvariance() { engine.set_row_invariant(before); }
  } restore{target, target.row_invariant()};
  target.set_row_invariant(true);
  ForwardCapture capture{.want_last_hidden = true};
  const SamplingParams greedy;
  std::vector<SequenceStep> batch;
  std::vector<Drafting*> in_batch;  // batch[b]'s sequence
  std::vector<float> hidden;        // [rows of the call, width] every batch entry's rows in batch order
  for (int64_t i = 0; i < depth; ++i) {
    batch.clear();
    in_batch.clear();
    hidden.clear();
    for (Drafting& s : drafting) {
      if (s.ask->k <= i) continue;
      batch.push_back({i == 0 ? &s.ask->drafter->cache_ : &*s.chain, s.tokens});
      in_batch.push_back(&s);
      hidden.insert(hidden.end(), s.hidden.begin(), s.hidden.end());
    }
    const ConstMatrix h(hidden.data(), static_cast<int64_t>(hidden.size()) / width, width);
    auto logits = target.forward_mtp(0, batch, h, true, &capture);  // [batch entries, vocab]
    if (!logits.is_ok()) {
      for (MtpAsk& ask : asks) ask.drafts.clear();
      return logits.status().with_context(fmt::format("MTP draft {} of {} sequences", i + 1, batch.size()));
    }
    int64_t row = 0;  // the entry's first row of capture.last_hidden
    for (size_t b = 0; b < in_batch.size(); ++b) {
      Drafting& s = *in_batch[b];
      MtpDrafter& d = *s.ask->drafter;
      if (i == 0) {  // the target's rows are in: what stays in the cache from now on
        d.fed_ = s.kept;
        d.pending_.clear();
        if (s.ask->k > 1) s.chain.emplace(d.cache_.fork());
      }
      s.ask->drafts.push_back(
          pick_token(target.backend(), logits->row_span(static_cast<int64_t>(b)), greedy, 0));
      // Chained: the MTP layer's own output at the entry's last row stands for the target's hidden state.
      row += static_cast<int64_t>(s.tokens.size());
      const std::span<const float> last = capture.last_hidden.row(row - 1);
      s.hidden.assign(last.begin(), last.end());
      s.tokens.assign(1, s.ask->drafts.back());
    }
  }
  return Status::ok();
}

}  // namespace day0
