#include "eval/qa_metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace kvmem::eval {

std::vector<std::string> NormalizedTokens(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty() && cur != "a" && cur != "an" && cur != "the") out.push_back(cur);
    cur.clear();
  };
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isspace(u)) {
      flush();
    } else if (u < 128 && std::ispunct(u)) {
      continue;  // removed, not a separator ("don't" -> "dont")
    } else {
      cur.push_back(u < 128 ? static_cast<char>(std::tolower(u)) : c);
    }
  }
  flush();
  return out;
}

namespace {

// Tokens of `pred` also in `gold`, counted with multiplicity (each gold token used once).
int Overlap(const std::vector<std::string>& pred, const std::vector<std::string>& gold) {
  std::map<std::string, int> left;
  for (const std::string& t : gold) ++left[t];
  int n = 0;
  for (const std::string& t : pred) {
    auto it = left.find(t);
    if (it != left.end() && it->second > 0) {
      --it->second;
      ++n;
    }
  }
  return n;
}

}  // namespace

double TokenF1(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = NormalizedTokens(prediction), g = NormalizedTokens(gold);
  if (p.empty() || g.empty()) return p.empty() && g.empty() ? 1.0 : 0.0;
  const int common = Overlap(p, g);
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / p.size();
  const double recall = static_cast<double>(common) / g.size();
  return 2 * precision * recall / (precision + recall);
}

double Bleu1(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = NormalizedTokens(prediction), g = NormalizedTokens(gold);
  if (p.empty() || g.empty()) return 0.0;
  const double precision = static_cast<double>(Overlap(p, g)) / p.size();
  const double bp =
      p.size() >= g.size() ? 1.0 : std::exp(1.0 - static_cast<double>(g.size()) / p.size());
  return bp * precision;
}

}  // namespace kvmem::eval
