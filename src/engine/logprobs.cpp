#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

namespace kvmem::engine {

TokenLogprob LogprobOf(std::span<const float> logits, int32_t id, int top_n) {
  float max = logits[0];
  for (float l : logits) max = std::max(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  const auto logprob = [&](int32_t i) { return static_cast<float>(logits[i] - log_z); };

  TokenLogprob out;
  out.id = id;
  out.logprob = logprob(id);
  if (top_n <= 0) return out;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const size_t n = std::min(ids.size(), static_cast<size_t>(top_n));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                    });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace kvmem::engine
