#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvmem::engine {
namespace {

TEST(Logprobs, LogSoftmaxOfRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  const TokenLogprob t = LogprobOf(logits, 2, 3);
  EXPECT_EQ(t.id, 2);
  EXPECT_NEAR(t.logprob, 2.0 - z, 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  // Most likely first, the lower id first on ties.
  EXPECT_EQ(t.top[0].id, 1);
  EXPECT_EQ(t.top[1].id, 3);
  EXPECT_EQ(t.top[2].id, 2);
  EXPECT_NEAR(t.top[0].logprob, 3.0 - z, 1e-6);
  EXPECT_FLOAT_EQ(t.top[2].logprob, t.logprob);
}

TEST(Logprobs, LargeLogitsStayFiniteAndTopIsBounded) {
  const std::vector<float> logits = {1000.0f, 999.0f};
  const TokenLogprob t = LogprobOf(logits, 1, 5);
  EXPECT_NEAR(t.logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-5);
  EXPECT_EQ(t.top.size(), 2u);
  EXPECT_TRUE(LogprobOf(logits, 0, 0).top.empty());
}

}  // namespace
}  // namespace kvmem::engine
