#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace kvmem::engine {

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) {}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int32_t id = Draw(logits, history);
  ++drawn_[id];
  return id;
}

int32_t Sampler::Draw(std::span<const float> logits, std::span<const int32_t> history) {
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  cand_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) cand_[i] = {i, logits[i]};

  // Repetition penalty (CTRL-style, as llama.cpp): divide positive logits, multiply negative ones.
  if (config_.repeat_penalty != 1.0f && config_.repeat_last_n != 0) {
    size_t n = config_.repeat_last_n < 0 ? history.size()
                                         : std::min<size_t>(history.size(), config_.repeat_last_n);
    std::unordered_set<int32_t> seen(history.end() - n, history.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n_vocab) continue;
      float& l = cand_[id].logit;
      l = l > 0 ? l / config_.repeat_penalty : l * config_.repeat_penalty;
    }
  }

  if (config_.frequency_penalty != 0.0f || config_.presence_penalty != 0.0f) {
    for (const auto& [id, count] : drawn_) {
      if (id < 0 || id >= n_vocab) continue;
      cand_[id].logit -= static_cast<float>(count) * config_.frequency_penalty +
                         (count > 0 ? config_.presence_penalty : 0.0f);
    }
  }

  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (config_.temperature <= 0.0f) {
    return std::min_element(cand_.begin(), cand_.end(), by_logit)->id;
  }

  size_t n = cand_.size();
  if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + config_.top_k, cand_.end(), by_logit);
    n = config_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }

  // Softmax at temperature over the survivors (sorted, so cand_[0] holds the max).
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::exp(static_cast<double>(cand_[i].logit - cand_[0].logit) / config_.temperature);
    sum += p[i];
  }
  for (double& v : p) v /= sum;

  // top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (config_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i];
      if (cum >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  // min-p: drop tokens whose probability is below min_p times the top one.
  if (config_.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && p[keep] >= config_.min_p * p[0]) ++keep;
    n = keep;
  }

  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += p[i];
  std::uniform_real_distribution<double> uni(0.0, mass);
  double r = uni(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= p[i];
    if (r <= 0) return cand_[i].id;
  }
  return cand_[n - 1].id;
}

}  // namespace kvmem::engine
