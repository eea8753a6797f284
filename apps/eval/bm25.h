// Okapi BM25 over a fixed set of short documents (LoCoMo turns), the plaintext retrieval
// baseline of `kvmem eval locomo`: score(q, d) = sum over query terms t of
// idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)), with
// idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5)) (Lucene's non-negative form). Terms are
// NormalizedTokens (qa_metrics.h). Thread-safety: immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvmem::eval {

class Bm25Index {
 public:
  explicit Bm25Index(const std::vector<std::string>& documents, double k1 = 1.2, double b = 0.75);

  double Score(std::string_view query, size_t doc) const;
  // The k best documents (ties: lower index first), best first.
  std::vector<size_t> TopK(std::string_view query, size_t k) const;

 private:
  double Idf(const std::string& term) const;

  double k1_, b_;
  double avgdl_ = 0;
  std::vector<std::unordered_map<std::string, int>> tf_;  // per document
  std::vector<int> length_;
  std::unordered_map<std::string, int> df_;
};

}  // namespace kvmem::eval
