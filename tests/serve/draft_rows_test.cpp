// The draft-row cap's decisions (serve/draft_rows.h): which sequences draft, how many drafts, and when
// a step runs without any; and the acceptance estimate that orders them.
#include <gtest/gtest.h>

#include <vector>

#include "day0/serve/draft_rows.h"

namespace day0::serve {
namespace {

TEST(DraftRows, NoCapGivesEveryClaimWhatItWants) {
  const std::vector<DraftClaim> claims = {{1, 3, 0.1}, {1, 0, 0.9}, {2, 4, 0.0}};
  const DraftAllotment a = allot_draft_rows(claims, 0);
  EXPECT_EQ(a.drafts, (std::vector<int64_t>{3, 0, 4}));
  EXPECT_EQ(a.withheld, 0);
}

TEST(DraftRows, DecodingRowsThatFillTheCapLeaveNoDrafts) {
  // Eight decoding sequences under a cap of eight rows: the step runs as plain decoding.
  const std::vector<DraftClaim> claims(8, DraftClaim{1, 3, 1.0});
  const DraftAllotment a = allot_draft_rows(claims, 8);
  EXPECT_EQ(a.drafts, std::vector<int64_t>(8, 0));
  EXPECT_EQ(a.withheld, 24);
  // A rolled-back hybrid sequence feeds its accepted tokens again: its rows count too.
  const std::vector<DraftClaim> rolled = {{3, 4, 1.0}, {1, 4, 1.0}};
  EXPECT_EQ(allot_draft_rows(rolled, 4).drafts, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(allot_draft_rows(rolled, 5).drafts, (std::vector<int64_t>{1, 0}));
}

TEST(DraftRows, AStepThatPrefillsHasNoDrafts) {
  const std::vector<DraftClaim> claims = {{1, 3, 1.0}};
  EXPECT_EQ(allot_draft_rows(claims, 8, /*prefilling=*/true).drafts, (std::vector<int64_t>{0}));
  EXPECT_EQ(allot_draft_rows(claims, 8, /*prefilling=*/true).withheld, 3);
  EXPECT_EQ(allot_draft_rows(claims, 8, /*prefilling=*/false).drafts, (std::vector<int64_t>{3}));
  // Without a cap, drafts go with every step.
  EXPECT_EQ(allot_draft_rows(claims, 0, /*prefilling=*/true).drafts, (std::vector<int64_t>{3}));
}

TEST(DraftRows, TheRowsLeftGoToTheLikeliestDrafts) {
  // Three rows left: 0.95 (second draft 0.9025) beats 0.9, whose first draft beats 0.95's third
  // (0.857); 0.5 waits.
  const std::vector<DraftClaim> claims = {{1, 3, 0.9}, {1, 3, 0.5}, {1, 3, 0.95}};
  const DraftAllotment a = allot_draft_rows(claims, 6);
  EXPECT_EQ(a.drafts, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(a.withheld, 6);
  // A claim never gets more than it wants; the rows it leaves go to the others.
  const std::vector<DraftClaim> few = {{1, 1, 0.99}, {1, 3, 0.55}};
  EXPECT_EQ(allot_draft_rows(few, 6).drafts, (std::vector<int64_t>{1, 2}));  // 0.55^3 < 0.2
}

TEST(DraftRows, TiesGoToTheEarlierClaim) {
  const std::vector<DraftClaim> claims = {{1, 2, 0.8}, {1, 2, 0.8}};
  EXPECT_EQ(allot_draft_rows(claims, 3).drafts, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(allot_draft_rows(claims, 4).drafts, (std::vector<int64_t>{1, 1}));
}

TEST(DraftRows, DraftsUnlikelyToBeAcceptedAreNotVerified) {
  // 0.3 for the first draft, 0.09 for the second: only the first is worth its row.
  const std::vector<DraftClaim> claims = {{1, 3, 0.3}, {1, 3, 0.1}};
  const DraftAllotment a = allot_draft_rows(claims, 16);
  EXPECT_EQ(a.drafts, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(a.withheld, 5);
}

TEST(DraftRows, AcceptanceEstimateFollowsRecentStepsAndRecovers) {
  AcceptanceEstimate e;
  EXPECT_DOUBLE_EQ(e.value(), 0.5);  // the prior: one in two
  e.observe(4, 4);
  EXPECT_GT(e.value(), 0.8);
  AcceptanceEstimate rejected;
  rejected.observe(4, 0);
  EXPECT_LT(rejected.value(), kMinDraftAcceptance);  // its next step gets no draft
  // Steps without drafts decay the evidence: it is tried again after a few.
  int steps = 0;
  while (rejected.value() < kMinDraftAcceptance && steps < 100) {
    rejected.observe(0, 0);
    ++steps;
  }
  EXPECT_GE(steps, 1);
  EXPECT_LE(steps, 5);
  // Recent steps weigh more than old ones.
  AcceptanceEstimate turned;
  for (int i = 0; i < 10; ++i) turned.observe(3, 3);
  for (int i = 0; i < 10; ++i) turned.observe(3, 0);
  EXPECT_LT(turned.value(), 0.3);
}

}  // namespace
}  // namespace day0::serve
