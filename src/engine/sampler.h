// Token sampling from a logits vector: repetition penalty, then temperature, top-k, top-p,
// min-p, then a seeded draw; temperature <= 0 is greedy (argmax, lowest id on ties).
// The order follows llama.cpp's default chain so the same settings mean the same thing.
// Not thread-safe: one Sampler per sequence (it owns the RNG and scratch).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvmem::engine {

struct SamplerConfig {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last window
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // Picks the next token. `history` is the sequence so far (for the repetition penalty).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
};

// Index of the largest value; the lowest index wins ties.
int32_t Argmax(std::span<const float> logits);

}  // namespace kvmem::engine
