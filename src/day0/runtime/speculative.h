#pragma once
// Exact speculative decoding: a drafter proposes up to k tokens, the target model verifies them in one
// forward step (the last accepted token plus the k drafts, logits at every position), the longest
// agreeing prefix is kept plus one token of the target's own (a correction or a bonus), and the KV cache
// (and a hybrid's recurrent state) goes back over the rejected positions.
//  - Greedy: the target's argmax at each position, so the tokens are those of plain decoding.
//  - Sampling with a deterministic draft (n-gram lookup, a greedy draft model: q is one-hot): the
//    target draws its token y of each step from p with plain decoding's seed stream and accepts the
//    draft x when y == x. That is the accept/resample rule for one-hot q (accept with probability
//    p(x), else a draw from p without x, renormalised), and it gives the same tokens as plain decoding.
//  - A draft that samples (q a distribution): accept_or_resample below.
// Every recorded step comes from the target's logits through the sequence's SequenceSampler, so
// log-probabilities and penalties are those of plain decoding.
// The pieces are per sequence (a Drafter, verify_drafts over a logits matrix) so that a scheduler can
// verify the drafts of many sequences in one step; generate_speculative drives one sequence.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"

namespace day0 {

// Where drafts come from.
enum class DraftSource { kNone, kNgram, kSelfInt4, kMtp };
const char* draft_source_name(DraftSource s);  // "none", "ngram", "self-int4", "mtp"

inline constexpr int64_t kMaxSpecTokens = 16;  // --spec-tokens' upper bound

// Drafts for one sequence. `history` is every token of the sequence known so far (prompt and accepted
// output); its last token is not yet fed to the target. Returns up to `k` tokens that may follow it
// (fewer or none when it has no guess).
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Before the first proposal, with the target's prefill: a draft model pre-fills the prompt here, so
  // that its prefill counts in the time to first token, not in decode.
  virtual Status start(std::span<const int32_t> /*prompt*/) { return Status::ok(); }
  virtual Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) = 0;
  // Whether the drafter reads the target's hidden states (an MTP layer does): the target's steps then
  // capture the last decoder layer's output (ForwardCapture::want_last_hidden) and hand it to
  // observe_target.
  virtual bool reads_target_hidden() const { return false; }
  // The target's last decoder layer output [rows, hidden] (before the final norm) for the tokens it was
  // just fed, at positions `first`, first + 1, ...; rows past what the history keeps are stale by the next
  // propose (rejected drafts). first == 0: a new sequence.
  virtual void observe_target(ConstMatrix /*hidden*/, int64_t /*first*/) {}
};

// Prompt lookup: the latest earlier occurrence of the last n tokens of the history (n from max_n down to
// min_n) and the k tokens that followed it. No model. min_n 2 by default: a one-token match was right
// too rarely on SmolLM2's chat turns to pay for the wider verification step (bench/RESULTS.md).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int64_t max_n = 3, int64_t min_n = 2) : max_n_(max_n), min_n_(min_n) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override;

 private:
  int64_t max_n_, min_n_;
};

// A second model (the same model's weights quantized, made by `day0 quantize`), run greedily for k steps
// on its own cache, which is cut back to the common prefix with the history at each call. The draft
// engine must outlive the drafter.
class ModelDrafter final : public Drafter {
 public:
  explicit ModelDrafter(Engine& draft);
  Status start(std::span<const int32_t> prompt) override;
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override;

 private:
  // Cuts the cache back to at most `tokens` (a hybrid's state only goes back to its checkpoint or a
  // whole-block snapshot, or to 0); fed_ follows.
  void cut_back(int64_t tokens);
  Engine& draft_;
  KvCache cache_;
  std::vector<int32_t> fed_;  // the tokens the cache holds
};

// InvalidArgument when the draft model cannot draft for the target: another vocabulary size, or
// tokenizer files (tokenizer.json, tokenizer_config.json) that differ between the two folders.
Status check_draft_matches(const ModelSpec& target, const std::string& target_folder, const ModelSpec& draft,
                           const std::string& draft_folder);

// What speculation achieved over a generation.
struct SpecStats {
  int64_t verify_steps = 0;  // target forward steps after the prefill (each verifies 0..k drafts)
  int64_t drafted = 0;       // draft tokens proposed and verified
  int64_t accepted = 0;      // of those, accepted
  // [k] per draft position 1..k: how often a draft reached the target there, and was accepted.
  std::vector<int64_t> position_drafted, position_accepted;
  double draft_seconds = 0;  // in the drafter
  double acceptance_rate() const;
  double mean_accepted_per_step() const;  // accepted drafts per verification step
};

// The accept/resample rule for a sampled draft: draft token x drawn from q, target distribution p (both
// [vocab], summing to 1). Accepts x when u_accept < p(x) / q(x); otherwise returns a draw from
// normalize(max(0, p - q)) by u_resample (both uniforms in [0, 1)). The result is distributed as p.
struct DraftVerdict {
  int32_t token = -1;
  bool accepted = false;
};
DraftVerdict accept_or_resample(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_resample);

// Verifies `drafts` (d tokens) for one sequence against the target's logits [d + 1, vocab] (row i: after
// feeding the last accepted token and drafts 1..i), or [d, vocab] for a verification cut into several
// forward steps (no bonus row yet). Each row's token is picked by `sampler` (the one-hot rule above) and
// handed to `emit`, which returns false to stop there (a stop token, the token budget). Stops after the
// first token that differs from its draft, or after the last row. Returns the drafts accepted (0..d).
using EmitStep = std::function<bool(const GenerationStep& step)>;
int64_t verify_drafts(Backend& backend, ConstMatrix logits, std::span<const int32_t> drafts,
                      SequenceSampler& sampler, const EmitStep& emit);

struct SpecOptions {
  int64_t tokens = 4;  // k: drafts per verification step, 1..kMaxSpecTokens
  // Verification (and the re-feed after a hybrid's rejected drafts) runs on the engine's row-invariant
  // kernels (Engine::set_row_invariant): every row's logits are a one-token step's, so the output is
  // plain decoding's however many rows a step has. Without it the cpu backend computes more than
  // kGemvMaxRows rows with a GEMM (AMX or BF16 dot tiles) whose rounding differs: with BF16 activations a
  // near-tie can then flip.
  bool row_invariant = true;
  // Rows (the last accepted token and drafts) per verification forward step; 0: all k + 1 in one.
  int64_t rows_per_forward = 0;
};

struct SpecGeneration {
  GenerationResult result;
  SpecStats stats;
};

// One sequence from request.cache (or a fresh cache), as generate_batch would produce it, with drafts
// from `drafter`. The same validation and errors as generate_batch, and InvalidArgument for k outside
// 1..kMaxSpecTokens.
Result<SpecGeneration> generate_speculative(Engine& engine, const GenerationRequest& request,
                                            Drafter& drafter, const SpecOptions& options);

}  // namespace day0
