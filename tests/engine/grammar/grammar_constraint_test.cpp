// GrammarConstraint: the decode loop's view of a grammar (mask, accept, done).
#include "engine/grammar/grammar_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvmem::engine::grammar {
namespace {

TEST(GrammarConstraint, MasksAcceptsAndFinishes) {
  // ids: 0 "a", 1 "b", 2 "ab", 3 "<eos>" (end of generation), 4 "" (never allowed)
  const TokenTable table({"a", "b", "ab", "", ""}, {3});
  auto g = std::make_shared<const Grammar>(*Grammar::Parse(R"(root ::= "a" "b"?)"));
  GrammarConstraint c(g, &table);
  std::vector<float> logits(6, 1.0f);  // one padded id past the vocabulary
  ASSERT_TRUE(c.Mask(logits));
  EXPECT_EQ(logits, (std::vector<float>{1, -INFINITY, 1, -INFINITY, -INFINITY, -INFINITY}));
  EXPECT_FALSE(c.Accept(1));  // masked
  EXPECT_TRUE(c.Accept(0));
  EXPECT_FALSE(c.Done());     // "b" may follow
  logits.assign(6, 1.0f);
  ASSERT_TRUE(c.Mask(logits));
  EXPECT_EQ(logits[1], 1.0f);  // "b"
  EXPECT_EQ(logits[3], 1.0f);  // or the end
  EXPECT_TRUE(c.Accept(1));
  EXPECT_TRUE(c.Done());  // nothing but the end can follow
}

}  // namespace
}  // namespace kvmem::engine::grammar
