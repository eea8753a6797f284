// Token sampling from a logits vector: repetition penalty, OpenAI's frequency and presence
// penalties, then temperature, top-k, top-p, min-p, then a seeded draw; temperature <= 0 is
// greedy (argmax of the penalized logits, lowest id on ties). The order follows llama.cpp's
// default chain (penalties first) so the same settings mean the same thing.
//
// Frequency and presence penalties are OpenAI's definition,
//   logit[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty,
// where c[j] counts token j among the tokens this Sampler has drawn so far: the generated text
// only, never the prompt (as OpenAI and vLLM count). The repetition penalty, by contrast, looks
// at `history` (prompt included), as llama.cpp's does.
// Not thread-safe: one Sampler per sequence (it owns the RNG, the counts and scratch).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvmem::engine {

struct SamplerConfig {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last window
  int repeat_last_n = 64;
  float frequency_penalty = 0.0f;  // [-2, 2]; 0: off
  float presence_penalty = 0.0f;   // [-2, 2]; 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // Picks the next token and counts it as drawn (for the frequency and presence penalties).
  // `history` is the sequence so far (for the repetition penalty).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };

  int32_t Draw(std::span<const float> logits, std::span<const int32_t> history);

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
  std::unordered_map<int32_t, int> drawn_;  // token -> times this sampler returned it
};

// Index of the largest value; the lowest index wins ties.
int32_t Argmax(std::span<const float> logits);

}  // namespace kvmem::engine
