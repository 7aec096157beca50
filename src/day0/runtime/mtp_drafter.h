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
#include <cstdint>
#include <span>
#include <vector>

#include "day0/runtime/speculative.h"

namespace day0 {

class MtpDrafter final : public Drafter {
 public:
  // `target` runs MTP layers (EngineOptions::mtp_layers) and outlives the drafter. Every draft depth runs
  // MTP layer 0 (most releases ship one).
  explicit MtpDrafter(Engine& target);
  bool reads_target_hidden() const override { return true; }
  void observe_target(ConstMatrix hidden, int64_t first) override;
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override;

 private:
  Engine& target_;
  KvCache cache_;  // MTP layer 0's rows [0, fed_), from the target's hidden states
  int64_t fed_ = 0;
  // The target's hidden states [rows, hidden] of positions fed_, fed_ + 1, ... not fed to the MTP layer yet.
  std::vector<float> pending_;
  // The target fed positions this drafter never saw (a prefix-cache hit): no drafts until a new sequence.
  bool blind_ = false;
};

}  // namespace day0
