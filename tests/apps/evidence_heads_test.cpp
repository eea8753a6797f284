// The per-head evidence tally (apps/eval/evidence_heads.h) on hand-built scores: hits against
// ranks worked out by hand (max over tokens, ties to the earlier block), and the chance rate
// against the hypergeometric probability computed by hand.
#include "eval/evidence_heads.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvmem::eval {
namespace {

TEST(EvidenceHeads, HitsFollowEachHeadsTopKOfItsMaxOverTokens) {
  // 1 layer, 2 heads, top 2, 2 tokens, 5 blocks; rows t * n_heads + h.
  EvidenceHeads tally(1, 2, 2);
  const std::vector<float> scores = {
      // token 0, head 0: block 3 highest
      0.0f, 1.0f, 0.5f, 3.0f, 0.2f,
      // token 0, head 1: block 3 lowest
      5.0f, 4.0f, 3.0f, -1.0f, 2.0f,
      // token 1, head 0: block 0 reaches 2.0 (max over tokens: 2.0, 1.0, 0.5, 3.0, 0.2)
      2.0f, 0.0f, 0.0f, 0.0f, 0.0f,
      // token 1, head 1: block 4 ties block 0 at 5.0 (max: 5.0, 4.0, 3.0, -1.0, 5.0)
      0.0f, 0.0f, 0.0f, 0.0f, 5.0f};
  // Head 0's top 2: blocks 3 and 0. Head 1's: blocks 0 and 4 (the tie goes to block 0 first, and
  // 4 outranks 1).
  const std::vector<BlockSpan> evidence = {{3, 3}, {1, 2}, {4, 4}};
  tally.AddLayer(0, scores, 2, 5, evidence);
  tally.EndQuestion(evidence, 5);
  const auto heads = tally.Ranked();
  ASSERT_EQ(heads.size(), 2u);
  // Head 0: turn {3} yes, {1, 2} no, {4} no: 1/3. Head 1: {3} no, {1, 2} no, {4} yes: 1/3.
  EXPECT_EQ(heads[0].layer, 0);
  EXPECT_EQ(heads[0].head, 0);
  EXPECT_DOUBLE_EQ(heads[0].hit_rate, 1.0 / 3);
  EXPECT_DOUBLE_EQ(heads[1].hit_rate, 1.0 / 3);
  EXPECT_EQ(tally.n_turns(), 3);
  EXPECT_EQ(tally.n_questions(), 1);
  // Chance, 2 of 5 blocks drawn: one-block turn 1 - 4/5 * 3/4 = 0.4; two-block turn
  // 1 - 3/5 * 2/4 = 0.7; mean over the three turns (0.4 + 0.7 + 0.4) / 3.
  EXPECT_NEAR(tally.chance(), 0.5, 1e-12);
  EXPECT_NE(tally.Markdown(5).find("| 0 | 0 | 0.333 |"), std::string::npos);
}

TEST(EvidenceHeads, BlockRangesAreClampedToTheHistory) {
  EvidenceHeads tally(2, 1, 1);
  const std::vector<float> scores = {0.0f, 1.0f};     // 1 token, 1 head, 2 blocks: block 1 first
  const std::vector<BlockSpan> evidence = {{1, 7}};  // runs past the history's 2 blocks
  tally.AddLayer(1, scores, 1, 2, evidence);
  tally.EndQuestion(evidence, 2);
  const auto heads = tally.Ranked();
  EXPECT_EQ(heads[0].layer, 1);
  EXPECT_DOUBLE_EQ(heads[0].hit_rate, 1.0);
  EXPECT_DOUBLE_EQ(heads[1].hit_rate, 0.0);  // layer 0 saw nothing
  EXPECT_DOUBLE_EQ(tally.chance(), 1.0);     // one of 2 blocks drawn, the turn covers both
}

}  // namespace
}  // namespace kvmem::eval
