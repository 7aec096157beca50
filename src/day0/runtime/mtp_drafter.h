#pragma once
// Drafts from the checkpoint's own multi-token-prediction layers (DeepSeek-V3's eh_proj layout and
// DeepSeek-V4's over hyper-connection streams, Engine::forward_mtp). MTP row t reads the target's last hidden
// state h_t ([residual_width()]: the streams with hyper-connections) and the token x_{t+1} and predicts
// x_{t+2}; its KV cache holds a row for every position the target has kept, fed with the target's hidden
// states (the prompt's from the prefill, then each verification step's accepted rows). A proposal first feeds
// the rows the target kept since the last one (their last logits: draft 1), then chains: draft i + 1 from the
// MTP layer's own output at draft i (before its norm) and draft i, on a fork of the cache dropped after.
// Drafts are greedy and verification is the target's, so the output is plain decoding's. A sequence whose
// first rows the target took from elsewhere (a server's prefix cache) gets no drafts: those rows' hidden
// states were never seen.
// Many sequences draft at once with mtp_propose_batch (serve: one forward_mtp call per draft depth for every
// drafting sequence); a lone proposal (`run`) is its one-sequence case.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/runtime/speculative.h"

namespace day0 {

class MtpDrafter;

// A sequence asking its MtpDrafter for drafts (mtp_propose_batch).
struct MtpAsk {
  MtpDrafter* drafter = nullptr;
  std::span<const int32_t> history;  // as Drafter::propose's: every known token, the last not fed yet
  int64_t k = 0;                     // drafts wanted; <= 0: none
  std::vector<int32_t> drafts;       // out: k greedy tokens, or none
  Status status;                     // out: why an ask that could draft has none (hidden states missing)
};

// Greedy drafts for every ask (one per drafter) from MTP layer 0 of `target` (every drafter's engine), in
// max(k) forward_mtp calls: the first feeds every drafting sequence's rows the target kept since its last
// proposal (their last logits: draft 1), each later one the previous draft of the sequences that want more.
// The calls run on the row-invariant kernels (Engine::set_row_invariant, restored after): a sequence's drafts
// are the ones it drafts alone, whatever its neighbours in the calls. An ask with k <= 0, a blind drafter or
// no new rows gets no drafts. A failed call leaves every ask without drafts and is returned; the drafters
// keep the target's rows the first call fed (none when it was the one that failed).
Status mtp_propose_batch(Engine& target, std::span<MtpAsk> asks);

class MtpDrafter final : public Drafter {
 public:
  // `target` runs MTP layers (EngineOptions::mtp_layers) and outlives the drafter. Every draft depth runs
  // MTP layer 0 (most releases ship one).
  explicit MtpDrafter(Engine& target);
  bool reads_target_hidden() const override { return true; }
  void observe_target(ConstMatrix hidden, int64_t first) override;
  // mtp_propose_batch of this sequence alone; its error, or the ask's.
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override;

 private:
  friend Status mtp_propose_batch(Engine& target, std::span<MtpAsk> asks);
  Engine& target_;
  KvCache cache_;  // MTP layer 0's rows [0, fed_), from the target's hidden states
  int64_t fed_ = 0;
  // The target's hidden states [rows, hidden] of positions fed_, fed_ + 1, ... not fed to the MTP layer yet.
  std::vector<float> pending_;
  // The target fed positions this drafter never saw (a prefix-cache hit): no drafts until a new sequence.
  bool blind_ = false;
};

}  // namespace day0
