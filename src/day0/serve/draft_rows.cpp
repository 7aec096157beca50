#include "day0/serve/draft_rows.h"

#include <algorithm>
#include <cmath>

namespace day0::serve {

DraftAllotment allot_draft_rows(std::span<const DraftClaim> claims, int64_t max_rows, bool prefilling) {
  DraftAllotment out;
  out.drafts.assign(claims.size(), 0);
  int64_t wanted = 0, rows = 0;
  for (const DraftClaim& c : claims) {
    wanted += c.wanted;
    rows += c.rows;
  }
  if (max_rows <= 0) {
    for (size_t i = 0; i < claims.size(); ++i) out.drafts[i] = claims[i].wanted;
    return out;
  }
  for (int64_t left = prefilling ? 0 : max_rows - rows; left > 0; --left) {
    // The claim whose next draft is likeliest to be accepted.
    double best_chance = kMinDraftAcceptance;
    size_t best = claims.size();
    for (size_t i = 0; i < claims.size(); ++i) {
      if (out.drafts[i] >= claims[i].wanted) continue;
      const double chance = std::pow(claims[i].acceptance, static_cast<double>(out.drafts[i] + 1));
      if (chance > best_chance || (best == claims.size() && chance >= best_chance)) {
        best_chance = chance;
        best = i;
      }
    }
    if (best == claims.size()) break;
    ++out.drafts[best];
  }
  int64_t allotted = 0;
  for (int64_t d : out.drafts) allotted += d;
  out.withheld = wanted - allotted;
  return out;
}

}  // namespace day0::serve
