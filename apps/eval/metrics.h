// Per-token fidelity metrics between a reference next-token distribution and a test one, both
// given as raw logits: the test's negative log-likelihood of the true next token and
// KL(P_ref || P_test) over the whole vocabulary. Everything after the logits is computed in
// double with a max-shifted log-sum-exp, so a KL of 1e-6 is not rounding noise of float sums.
//
// Thread-safety: pure functions; a MetricSums is a plain value (one per thread, then Merge).
#pragma once

#include <cstdint>
#include <span>

namespace kvmem::eval {

// log(sum_i exp(x_i)), computed as max + log(sum exp(x_i - max)). Precondition: x non-empty.
double LogSumExp(std::span<const float> x);

// -log softmax(logits)[target]. Precondition: 0 <= target < logits.size().
double NegLogLikelihood(std::span<const float> logits, int32_t target);

// KL(P || Q) = sum_i p_i (log p_i - log q_i) with P = softmax(p_logits), Q = softmax(q_logits),
// in nats. Exactly 0 when the logits are identical; clamped at 0 against rounding otherwise.
// Precondition: equal, non-zero sizes.
double KlDivergence(std::span<const float> p_logits, std::span<const float> q_logits);
// The same with both log-sum-exps already known (each row's is needed for its NLL too).
double KlDivergence(std::span<const float> p_logits, double lse_p, std::span<const float> q_logits,
                    double lse_q);

// Sums over scored positions of one metric stream (one KV format in one context length).
struct MetricSums {
  int64_t n = 0;
  double nll = 0;     // sum of NLL
  double kl = 0;      // sum of KL to the reference
  double max_kl = 0;  // largest single-position KL

  void Add(double token_nll, double token_kl);
  void Merge(const MetricSums& o);
  double mean_nll() const { return n ? nll / n : 0.0; }
  double perplexity() const;  // exp(mean NLL)
  double mean_kl() const { return n ? kl / n : 0.0; }
};

}  // namespace kvmem::eval
