#include "eval/metrics.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvmem::eval {

double LogSumExp(std::span<const float> x) {
  assert(!x.empty());
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

double NegLogLikelihood(std::span<const float> logits, int32_t target) {
  assert(target >= 0 && static_cast<size_t>(target) < logits.size());
  return LogSumExp(logits) - static_cast<double>(logits[target]);
}

double KlDivergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  return KlDivergence(p_logits, LogSumExp(p_logits), q_logits, LogSumExp(q_logits));
}

double KlDivergence(std::span<const float> p_logits, double lse_p, std::span<const float> q_logits,
                    double lse_q) {
  assert(p_logits.size() == q_logits.size() && !p_logits.empty());
  double kl = 0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = p_logits[i] - lse_p;
    const double log_q = q_logits[i] - lse_q;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

void MetricSums::Add(double token_nll, double token_kl) {
  ++n;
  nll += token_nll;
  kl += token_kl;
  max_kl = std::max(max_kl, token_kl);
}

void MetricSums::Merge(const MetricSums& o) {
  n += o.n;
  nll += o.nll;
  kl += o.kl;
  max_kl = std::max(max_kl, o.max_kl);
}

double MetricSums::perplexity() const { return std::exp(mean_nll()); }

}  // namespace kvmem::eval
