#pragma once
// The draft-row cap of speculative serving: how many draft rows a step verifies, and whose.
// Verification rows run on the row-invariant kernels, whose cost grows with every row (about 0.18 of a
// one-token step per row past the first on SmolLM2-135M, bench/RESULTS.md), while plain decoding's
// rows of many sequences share one weight read on the fast kernels. So a step drafts only while its
// decoding rows and drafts stay within a budget of rows; once the decoding rows alone fill it, the
// step runs as plain decoding (no drafts, the fast kernels). Nor does a step draft while it prefills:
// the prefill chunks' call reads every weight anyway and the decoding rows ride along in it, where
// verification would need a second call of its own. Within the budget the drafts go to the
// sequences whose drafts were recently accepted most, and a draft whose estimated chance of being
// accepted is below what its row costs is not verified.
#include <cstdint>
#include <span>
#include <vector>

namespace day0::serve {

// Rows a step's verification call may hold by default (--spec-max-rows): one sequence's K drafts fit,
// eight decoding sequences alone run as plain decoding.
inline constexpr int64_t kDefaultSpecMaxRows = 8;

// A draft at position i is verified only when its estimated chance of acceptance (the sequence's
// recent acceptance to the power i) is at least this: below it the row costs more than it is
// expected to give (the per-row cost above).
inline constexpr double kMinDraftAcceptance = 0.2;

// One decoding sequence's claim on the step's verification rows.
struct DraftClaim {
  int64_t rows = 1;         // rows it feeds without drafts (its last token; more after a rollback)
  int64_t wanted = 0;       // drafts it could add (found by the drafter, or allowed by k and its room)
  double acceptance = 1.0;  // its recent acceptance estimate, 0..1
};

struct DraftAllotment {
  std::vector<int64_t> drafts;  // per claim: the drafts it may verify (0..wanted)
  int64_t withheld = 0;         // drafts wanted and not allotted
};

// Allots draft rows under `max_rows` rows in all (0: no cap, every claim gets what it wants). When the
// claims' own rows reach max_rows, or the step prefills too (`prefilling`), nobody drafts. Otherwise
// the rows left go one draft at a time to the claim whose next draft is likeliest to be accepted
// (acceptance^position, ties to the earlier claim), down to kMinDraftAcceptance.
DraftAllotment allot_draft_rows(std::span<const DraftClaim> claims, int64_t max_rows,
                                bool prefilling = false);

// A sequence's recent acceptance: accepted over drafted, both decayed at every decoding step (drafted
// or not) towards a prior of one in two, so that a sequence whose drafts stopped being verified is
// tried again after a few steps.
class AcceptanceEstimate {
 public:
  double value() const { return (accepted_ + kPrior) / (drafted_ + 2 * kPrior); }
  // A decoding step that verified `drafted` drafts (0: none) and accepted the first `accepted`.
  void observe(int64_t drafted, int64_t accepted) {
    drafted_ = kDecay * drafted_ + static_cast<double>(drafted);
    accepted_ = kDecay * accepted_ + static_cast<double>(accepted);
  }

 private:
  static constexpr double kPrior = 1.0;
  static constexpr double kDecay = 0.8;
  double drafted_ = 0, accepted_ = 0;
};

}  // namespace day0::serve
