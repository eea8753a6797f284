#include "memory/segments/importance.h"

#include <algorithm>
#include <numeric>

namespace kvmem::memory::segments {

std::vector<int> TopByTokens(std::span<const double> score, std::span<const int64_t> tokens,
                             int64_t budget) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  std::vector<int> chosen;
  if (budget <= 0) return chosen;
  int64_t used = 0;
  for (int s : order) {
    if (chosen.empty() || used + tokens[s] <= budget) {
      chosen.push_back(s);
      used += tokens[s];
    }
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::vector<int> MultiHopSelect(const LayerImportance& in, int64_t budget, int max_hops, int* hops,
                                bool query_source) {
  const size_t n = in.query.size();
  std::vector<int> relevant = TopByTokens(in.query, in.tokens, budget);
  int rounds = 0;
  std::vector<double> score(n);
  while (rounds < max_hops) {
    ++rounds;
    // Every relevant segment (and with query_source the query) is one source.
    const double sources = static_cast<double>(relevant.size()) + (query_source ? 1 : 0);
    for (size_t b = 0; b < n; ++b) {
      double sum = query_source ? in.query[b] : 0.0;
      for (int a : relevant) sum += in.cross[a][b];
      score[b] = sources > 0 ? sum / sources : in.query[b];
    }
    std::vector<int> next = TopByTokens(score, in.tokens, budget);
    if (next == relevant) break;
    relevant = std::move(next);
  }
  if (hops) *hops = rounds;
  return relevant;
}

std::vector<int> SingleHopSelect(const LayerImportance& in, int64_t budget) {
  return TopByTokens(in.query, in.tokens, budget);
}

std::vector<double> RecomputeRatios(int n_layers, double average) {
  std::vector<double> r(static_cast<size_t>(n_layers), 0.0);
  if (n_layers <= 0) return r;
  r[0] = 1.0;
  const int m = n_layers - 1;
  if (m == 0) return r;
  // Layers 1..m share what is left of the total, weighted m, m-1, ..., 1.
  const double rest = std::clamp(average * n_layers - 1.0, 0.0, static_cast<double>(m));
  const double weights = m * (m + 1) / 2.0;
  double spill = 0;
  for (int i = 1; i <= m; ++i) {
    const double want = rest * (m - i + 1) / weights + spill;
    r[i] = std::min(1.0, want);
    spill = want - r[i];  // a layer at 1 hands the excess on, keeping the mean
  }
  return r;
}

std::vector<double> FixedRecomputeRatios(int n_layers, double average) {
  std::vector<double> r(static_cast<size_t>(n_layers), 0.0);
  if (n_layers <= 0) return r;
  r[0] = 1.0;
  if (n_layers == 1) return r;
  const double rest = std::clamp((average * n_layers - 1.0) / (n_layers - 1), 0.0, 1.0);
  for (int i = 1; i < n_layers; ++i) r[i] = rest;
  return r;
}

}  // namespace kvmem::memory::segments
