// NLL, KL and their sums against values computed by hand.
#include "eval/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvmem::eval {
namespace {

std::vector<float> Logs(std::vector<double> p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

TEST(Metrics, LogSumExpIsStableForLargeLogits) {
  const std::vector<float> x = {1000.0f, 1000.0f};
  EXPECT_NEAR(LogSumExp(x), 1000.0 + std::log(2.0), 1e-9);
  const std::vector<float> y = {-1000.0f, 0.0f};
  EXPECT_NEAR(LogSumExp(y), 0.0, 1e-12);
}

TEST(Metrics, NegLogLikelihood) {
  // Uniform over 4: -log(1/4).
  EXPECT_NEAR(NegLogLikelihood(std::vector<float>{3, 3, 3, 3}, 2), std::log(4.0), 1e-12);
  // softmax(0, ln 3) = (1/4, 3/4).
  const std::vector<float> l = {0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(NegLogLikelihood(l, 1), -std::log(0.75), 1e-7);
  EXPECT_NEAR(NegLogLikelihood(l, 0), std::log(4.0), 1e-7);
}

TEST(Metrics, KlOfKnownDistributions) {
  // P = (1/2, 1/4, 1/4), Q = (1/4, 1/2, 1/4):
  // KL(P||Q) = 1/2 ln 2 + 1/4 ln(1/2) + 0 = 1/4 ln 2; KL(Q||P) = 1/4 ln(1/2) + 1/2 ln 2 = 1/4 ln 2.
  const std::vector<float> p = Logs({0.5, 0.25, 0.25}), q = Logs({0.25, 0.5, 0.25});
  EXPECT_NEAR(KlDivergence(p, q), 0.25 * std::log(2.0), 1e-7);
  // P = (0.9, 0.1), Q = (0.5, 0.5): 0.9 ln 1.8 + 0.1 ln 0.2.
  const double expected = 0.9 * std::log(1.8) + 0.1 * std::log(0.2);
  EXPECT_NEAR(KlDivergence(Logs({0.9, 0.1}), Logs({0.5, 0.5})), expected, 1e-7);
  // Logits are defined up to a constant per distribution.
  std::vector<float> shifted = q;
  for (float& x : shifted) x += 37.0f;
  EXPECT_NEAR(KlDivergence(p, shifted), 0.25 * std::log(2.0), 1e-6);
}

TEST(Metrics, KlOfIdenticalLogitsIsExactlyZero) {
  std::vector<float> x;
  for (int i = 0; i < 1000; ++i) x.push_back(std::sin(i * 0.37f) * 12.0f);
  EXPECT_EQ(KlDivergence(x, x), 0.0);
  std::vector<float> y = x;
  y[5] += 1e-3f;
  EXPECT_GT(KlDivergence(x, y), 0.0);
}

TEST(Metrics, SumsGivePerplexityAndMeans) {
  MetricSums s;
  EXPECT_EQ(s.perplexity(), 1.0);
  s.Add(std::log(2.0), 0.1);
  s.Add(std::log(8.0), 0.3);
  EXPECT_EQ(s.n, 2);
  EXPECT_NEAR(s.perplexity(), 4.0, 1e-12);  // exp(mean(ln 2, ln 8))
  EXPECT_NEAR(s.mean_kl(), 0.2, 1e-12);
  EXPECT_EQ(s.max_kl, 0.3);
  MetricSums t;
  t.Add(std::log(4.0), 0.5);
  s.Merge(t);
  EXPECT_EQ(s.n, 3);
  EXPECT_NEAR(s.perplexity(), 4.0, 1e-12);
  EXPECT_NEAR(s.mean_kl(), 0.3, 1e-12);
  EXPECT_EQ(s.max_kl, 0.5);
}

}  // namespace
}  // namespace kvmem::eval
