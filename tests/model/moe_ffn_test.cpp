#include "model/moe_ffn.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvmem::model {
namespace {

ModelSpec MoeSpec(int n_expert, int n_used, bool norm) {
  ModelSpec s;
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  s.expert_weights_norm = norm;
  return s;
}

// The n_expert_used most probable experts, best first, lower index on ties; weights are their
// probabilities, divided by their sum when normalized (hand-computed below).
TEST(MoeFfn, SelectsTheMostProbableExperts) {
  const std::vector<float> probs = {0.1f, 0.4f, 0.2f, 0.3f,    // token 0
                                    0.25f, 0.25f, 0.4f, 0.1f};  // token 1: a tie for second
  std::vector<int32_t> chosen(4);
  std::vector<float> weights(4);
  SelectExperts(MoeSpec(4, 2, false), probs.data(), 2, chosen.data(), weights.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_EQ(weights, (std::vector<float>{0.4f, 0.3f, 0.4f, 0.25f}));
  SelectExperts(MoeSpec(4, 2, true), probs.data(), 2, chosen.data(), weights.data());
  EXPECT_FLOAT_EQ(weights[0], 0.4f / 0.7f);
  EXPECT_FLOAT_EQ(weights[1], 0.3f / 0.7f);
  EXPECT_FLOAT_EQ(weights[2], 0.4f / 0.65f);
  EXPECT_FLOAT_EQ(weights[3], 0.25f / 0.65f);
}

// A sum below ggml's floor (the smallest normal f16) is divided by the floor instead.
TEST(MoeFfn, TinyWeightSumsAreClamped) {
  const std::vector<float> probs = {1e-6f, 2e-6f, 1.0f - 3e-6f};
  std::vector<int32_t> chosen(1);
  std::vector<float> weights(1);
  ModelSpec s = MoeSpec(3, 1, true);
  const std::vector<float> low = {2e-6f, 1e-6f, 1e-6f};
  SelectExperts(s, low.data(), 1, chosen.data(), weights.data());
  EXPECT_EQ(chosen[0], 0);
  EXPECT_FLOAT_EQ(weights[0], 2e-6f / 6.103515625e-5f);
  SelectExperts(s, probs.data(), 1, chosen.data(), weights.data());
  EXPECT_EQ(chosen[0], 2);
  EXPECT_FLOAT_EQ(weights[0], 1.0f);
}

}  // namespace
}  // namespace kvmem::model
