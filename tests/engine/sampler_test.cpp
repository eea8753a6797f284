#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_strings.h"

namespace kvmem::engine {
namespace {

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplerConfig c;
  c.temperature = 0;
  Sampler s(c);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.Sample(logits, {}), 1);
  EXPECT_EQ(Argmax(logits), 1);
}

TEST(Sampler, RepetitionPenaltyAsCtrl) {
  SamplerConfig c;
  c.temperature = 0;
  c.repeat_penalty = 2.0f;
  Sampler s(c);
  // token 0: 3.0 -> 1.5 after penalty; token 1 (2.0) now wins. Negative logits get multiplied.
  std::vector<float> logits = {3.0f, 2.0f, -0.1f};
  std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.Sample(logits, hist), 1);
}

// OpenAI's penalties: logit[j] -= c[j] * frequency + (c[j] > 0) * presence, c counting the
// tokens this sampler drew (not the prompt). Hand-computed greedy picks.
TEST(Sampler, FrequencyPenaltyScalesWithCount) {
  SamplerConfig c;
  c.temperature = 0;
  c.frequency_penalty = 0.6f;
  Sampler s(c);
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f};
  EXPECT_EQ(s.Sample(logits, {}), 0);  // nothing drawn yet: 2.0, 1.0, 0.5
  EXPECT_EQ(s.Sample(logits, {}), 0);  // c0 = 1: 1.4 > 1.0
  EXPECT_EQ(s.Sample(logits, {}), 1);  // c0 = 2: 0.8 < 1.0
  EXPECT_EQ(s.Sample(logits, {}), 0);  // c0 = 2, c1 = 1: 0.8, 0.4, 0.5
  EXPECT_EQ(s.Sample(logits, {}), 2);  // c0 = 3, c1 = 1: 0.2, 0.4, 0.5
}

TEST(Sampler, PresencePenaltyIsFlat) {
  SamplerConfig c;
  c.temperature = 0;
  c.presence_penalty = 0.7f;
  Sampler s(c);
  const std::vector<float> logits = {2.0f, 1.5f, 1.2f};
  EXPECT_EQ(s.Sample(logits, {}), 0);  // 2.0, 1.5, 1.2
  EXPECT_EQ(s.Sample(logits, {}), 1);  // 1.3, 1.5, 1.2
  EXPECT_EQ(s.Sample(logits, {}), 0);  // 1.3, 0.8, 1.2: presence does not grow with the count
  EXPECT_EQ(s.Sample(logits, {}), 0);  // still 1.3
}

TEST(Sampler, PenaltiesIgnoreThePromptAndCombine) {
  SamplerConfig c;
  c.temperature = 0;
  c.frequency_penalty = 0.5f;
  c.presence_penalty = 0.25f;
  Sampler s(c);
  const std::vector<float> logits = {1.0f, 0.8f, 0.1f};
  const std::vector<int32_t> prompt = {0, 0, 0, 0};  // prompt tokens are not counted
  EXPECT_EQ(s.Sample(logits, prompt), 0);
  EXPECT_EQ(s.Sample(logits, prompt), 1);  // 1.0 - 0.5 - 0.25 = 0.25 < 0.8
  EXPECT_EQ(s.Sample(logits, prompt), 0);  // 0.25, 0.05, 0.1
  EXPECT_EQ(s.Sample(logits, prompt), 2);  // -0.25, 0.05, 0.1
  // Negative penalties encourage repetition: -2 makes a drawn token win over a better one.
  SamplerConfig e;
  e.temperature = 0;
  e.presence_penalty = -2.0f;
  Sampler t(e);
  const std::vector<float> second_best = {1.0f, 1.5f};
  EXPECT_EQ(t.Sample(std::vector<float>{1.0f, 0.0f}, {}), 0);
  EXPECT_EQ(t.Sample(second_best, {}), 0);  // 1.0 + 2 = 3.0 > 1.5
}

// The penalized logits are what temperature sampling sees: a token penalized far below the
// others is never drawn.
TEST(Sampler, PenaltiesApplyBeforeTemperature) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.frequency_penalty = 2.0f;
  c.presence_penalty = 2.0f;
  c.seed = 3;
  Sampler s(c);
  const std::vector<float> logits = {10.0f, 0.0f, 0.0f};
  EXPECT_EQ(s.Sample(logits, {}), 0);  // p(0) ≈ 1 - 9e-5
  // Now token 0 sits at 10 - 2 - 2 = 6: still likely; after three more draws of it, at
  // 10 - 4*2 - 2 = 0, level with the others.
  int zeros = 0;
  for (int i = 0; i < 200; ++i) zeros += s.Sample(logits, {}) == 0;
  EXPECT_LT(zeros, 120);  // without the penalties nearly all 200 would be token 0
}

// With top_k = 2 only the two best tokens may ever be drawn, in proportion to their softmax.
TEST(Sampler, TopKFrequenciesMatchSoftmax) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 2;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.seed = 7;
  Sampler s(c);
  std::vector<float> logits = {1.0f, 0.0f, 0.9f, -5.0f};
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.Sample(logits, {})]++;
  EXPECT_EQ(counts.size(), 2u);
  const double p0 = 1.0 / (1.0 + std::exp(-0.1));  // P(token 0 | {0, 2})
  EXPECT_NEAR(counts[0] / double(n), p0, 0.015);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 0;
  c.top_p = 0.5f;
  c.min_p = 0;
  Sampler s(c);
  // p = softmax(log(0.6), log(0.3), log(0.1)) = 0.6, 0.3, 0.1: top_p 0.5 keeps only token 0.
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.Sample(logits, {}), 0);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.4f;  // keeps tokens with p >= 0.4 * 0.6 = 0.24: tokens 0 and 1
  Sampler s(c);
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  for (int i = 0; i < 500; ++i) EXPECT_NE(s.Sample(logits, {}), 2);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplerConfig c;
  c.temperature = 1.0f;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0;
  c.seed = 42;
  Sampler a(c), b(c);
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.7f);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Sample(logits, {}), b.Sample(logits, {}));
}

TEST(StopMatcher, HoldsBackPartialStopAndCutsBeforeIt) {
  StopMatcher m({"<|im_end|>", "\nUser:"});
  std::string out;
  out += m.Push("Hello <|im");
  EXPECT_EQ(out, "Hello ");
  out += m.Push("_e");
  EXPECT_EQ(out, "Hello ");
  out += m.Push("nd|> trailing");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello ");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, ReleasesFalseAlarm) {
  StopMatcher m({"STOP"});
  std::string out = m.Push("ST");
  EXPECT_EQ(out, "");
  out += m.Push("ART");
  EXPECT_EQ(out, "START");
  out += m.Push("S");
  out += m.Flush();
  EXPECT_EQ(out, "STARTS");
  EXPECT_FALSE(m.stopped());
}

}  // namespace
}  // namespace kvmem::engine
