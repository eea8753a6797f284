// The method sweep of `kvmem eval locomo` (eval/locomo_qa.h ExpandLocomoMethods): names,
// configurations and refusals.
#include <gtest/gtest.h>

#include "eval/locomo_qa.h"

namespace kvmem::eval {
namespace {

TEST(LocomoMethods, ExpandsTheSweep) {
  LocomoSweep s;
  s.names = {"full", "memart", "memart-coupled", "bm25", "embed"};
  s.block_sizes = {8, 16};
  s.strategies = {"softmax-sum", "rr-max"};
  s.top_k = {4, 32};
  s.bm25_k = {5, 10};
  s.embed_k = {3};
  s.keep_last = 48;
  auto m = ExpandLocomoMethods(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 1u + 8 + 8 + 2 + 1);
  EXPECT_EQ((*m)[0].name, "full");
  EXPECT_EQ((*m)[0].kind, LocomoMethodKind::kFull);
  EXPECT_EQ((*m)[1].name, "memart/softmax-sum/bs8/k4");
  EXPECT_EQ((*m)[1].memart.block_size, 8);
  EXPECT_EQ((*m)[1].memart.top_k, 4);
  EXPECT_EQ((*m)[1].memart.keep_last, 48);
  EXPECT_FALSE((*m)[1].memart.coupled_positions);
  EXPECT_EQ((*m)[8].name, "memart/rr-max/bs16/k32");
  EXPECT_EQ((*m)[8].memart.strategy.norm, memory::ScoreNorm::kReciprocalRank);
  EXPECT_EQ((*m)[8].memart.strategy.agg, memory::ScoreAgg::kMax);
  EXPECT_EQ((*m)[9].name, "memart-coupled/softmax-sum/bs8/k4");
  EXPECT_TRUE((*m)[9].memart.coupled_positions);
  EXPECT_EQ((*m)[17].name, "bm25/k5");
  EXPECT_EQ((*m)[18].turns_k, 10);
  EXPECT_EQ((*m)[19].name, "embed/k3");
  EXPECT_EQ((*m)[19].kind, LocomoMethodKind::kEmbed);
  EXPECT_EQ((*m)[19].turns_k, 3);
}

TEST(LocomoMethods, RefusesBadInput) {
  LocomoSweep s;
  s.names = {"h2o-ish"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {"memart"};
  s.block_sizes = {12};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.block_sizes = {16};
  s.strategies = {"softmax-mean"};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.strategies = {"softmax-sum"};
  s.top_k = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s = {};
  s.names = {"bm25"};
  s.bm25_k = {0};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {"embed"};
  s.embed_k = {-1};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.embed_k = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
  s.names = {};
  EXPECT_FALSE(ExpandLocomoMethods(s).ok());
}

}  // namespace
}  // namespace kvmem::eval
