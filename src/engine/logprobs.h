// Log-probabilities of tokens under the model's raw next-token distribution: log-softmax of the
// logits as the forward pass returns them, before any sampler setting (temperature, penalties,
// top-k/p) touches them. That is what vLLM returns by default ("raw_logprobs") and what a scorer
// such as lm-eval-harness needs: the model's own likelihood, independent of how it was sampled.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvmem::engine {

struct TopToken {
  int32_t id = 0;
  float logprob = 0;
};

// One position's account: the logprob of the token that came next (sampled or given) and the
// `top` most likely tokens, most likely first (ties: lower id first).
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<TopToken> top = {};
};

// The most alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;

// logits: (n_vocab); 0 <= id < n_vocab; top_n in [0, n_vocab]. The log-sum-exp is taken in
// double precision.
TokenLogprob LogprobOf(std::span<const float> logits, int32_t id, int top_n);

}  // namespace kvmem::engine
