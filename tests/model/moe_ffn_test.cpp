#include "model/moe_ffn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvmem::model {
namespace {

ModelSpec MoeSpec(int n_expert, int n_used, ExpertGating gating) {
  ModelSpec s;
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  s.expert_gating = gating;
  return s;
}

// Logits whose softmax is the given probabilities.
std::vector<float> LogitsOf(const std::vector<float>& probs) {
  std::vector<float> z;
  for (float p : probs) z.push_back(std::log(p));
  return z;
}

// The n_expert_used largest logits, best first, lower index on ties. qwen3moe: weights are their
// softmax probabilities divided by the chosen ones' sum (hand-computed below).
TEST(MoeFfn, SelectsTheLargestLogits) {
  const std::vector<float> logits = LogitsOf({0.1f, 0.4f, 0.2f, 0.3f,      // token 0
                                              0.25f, 0.25f, 0.4f, 0.1f});  // token 1: a tie
  std::vector<int32_t> chosen(4);
  std::vector<float> weights(4);
  SelectExperts(MoeSpec(4, 2, ExpertGating::kSoftmaxNormalized), logits.data(), 2, chosen.data(),
                weights.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_NEAR(weights[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(weights[1], 0.3 / 0.7, 1e-6);
  EXPECT_NEAR(weights[2], 0.4 / 0.65, 1e-6);
  EXPECT_NEAR(weights[3], 0.25 / 0.65, 1e-6);
}

// GPT-OSS: a softmax over the chosen logits alone: e^2 / (e^2 + e^1) and e^1 / (e^2 + e^1).
TEST(MoeFfn, GptOssWeightsAreASoftmaxOfTheChosenLogits) {
  const std::vector<float> logits = {1.0f, -3.0f, 2.0f, 0.5f};
  std::vector<int32_t> chosen(2);
  std::vector<float> weights(2);
  SelectExperts(MoeSpec(4, 2, ExpertGating::kSoftmaxOfChosen), logits.data(), 1, chosen.data(),
                weights.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 0}));
  EXPECT_NEAR(weights[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(weights[1], std::exp(1.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
}

}  // namespace
}  // namespace kvmem::model
