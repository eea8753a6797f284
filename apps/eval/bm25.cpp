#include "eval/bm25.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "eval/qa_metrics.h"

namespace kvmem::eval {

Bm25Index::Bm25Index(const std::vector<std::string>& documents, double k1, double b)
    : k1_(k1), b_(b) {
  for (const std::string& d : documents) {
    const std::vector<std::string> terms = NormalizedTokens(d);
    std::unordered_map<std::string, int> tf;
    for (const std::string& t : terms) ++tf[t];
    for (const auto& [t, n] : tf) ++df_[t];
    tf_.push_back(std::move(tf));
    length_.push_back(static_cast<int>(terms.size()));
    avgdl_ += static_cast<double>(terms.size());
  }
  if (!documents.empty()) avgdl_ /= static_cast<double>(documents.size());
}

double Bm25Index::Idf(const std::string& term) const {
  auto it = df_.find(term);
  const double df = it == df_.end() ? 0.0 : it->second;
  const double n = static_cast<double>(tf_.size());
  return std::log(1.0 + (n - df + 0.5) / (df + 0.5));
}

double Bm25Index::Score(std::string_view query, size_t doc) const {
  double s = 0;
  const double norm = k1_ * (1 - b_ + b_ * (avgdl_ > 0 ? length_[doc] / avgdl_ : 0.0));
  for (const std::string& t : NormalizedTokens(query)) {  // repeated query terms count again
    auto it = tf_[doc].find(t);
    if (it == tf_[doc].end()) continue;
    const double f = it->second;
    s += Idf(t) * f * (k1_ + 1) / (f + norm);
  }
  return s;
}

std::vector<size_t> Bm25Index::TopK(std::string_view query, size_t k) const {
  std::vector<double> score(tf_.size());
  for (size_t d = 0; d < tf_.size(); ++d) score[d] = Score(query, d);
  std::vector<size_t> order(tf_.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](size_t a, size_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  order.resize(k);
  return order;
}

}  // namespace kvmem::eval
