#include "eval/evidence_heads.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>

namespace kvmem::eval {

EvidenceHeads::EvidenceHeads(int n_layers, int n_heads, int top_k)
    : n_layers_(n_layers),
      n_heads_(n_heads),
      top_k_(top_k),
      hits_(static_cast<size_t>(n_layers) * n_heads, 0) {}

void EvidenceHeads::AddLayer(int layer, std::span<const float> scores, int n_tokens,
                             int64_t n_blocks, std::span<const BlockSpan> evidence) {
  assert(layer >= 0 && layer < n_layers_);
  assert(scores.size() == static_cast<size_t>(n_tokens) * n_heads_ * n_blocks);
  std::vector<float> best(n_blocks);
  for (int h = 0; h < n_heads_; ++h) {
    std::fill(best.begin(), best.end(), -INFINITY);
    for (int t = 0; t < n_tokens; ++t) {
      const float* row = scores.data() + (static_cast<size_t>(t) * n_heads_ + h) * n_blocks;
      for (int64_t b = 0; b < n_blocks; ++b) best[b] = std::max(best[b], row[b]);
    }
    // A block is in the top k when fewer than k blocks rank above it (higher score, or equal
    // and earlier: TopKChronological's order).
    auto in_top = [&](int64_t b) {
      int64_t above = 0;
      for (int64_t o = 0; o < n_blocks && above < top_k_; ++o) {
        above += best[o] > best[b] || (best[o] == best[b] && o < b);
      }
      return above < top_k_;
    };
    for (const BlockSpan& turn : evidence) {
      for (int64_t b = std::max<int64_t>(0, turn.first); b <= std::min(turn.second, n_blocks - 1);
           ++b) {
        if (in_top(b)) {
          ++hits_[static_cast<size_t>(layer) * n_heads_ + h];
          break;
        }
      }
    }
  }
}

void EvidenceHeads::EndQuestion(std::span<const BlockSpan> evidence, int64_t n_blocks) {
  ++n_questions_;
  for (const BlockSpan& turn : evidence) {
    ++n_turns_;
    const int64_t m = std::clamp<int64_t>(turn.second - turn.first + 1, 0, n_blocks);
    // 1 - P(none of the turn's m blocks among k drawn of n without replacement).
    double none = 1.0;
    for (int64_t i = 0; i < std::min<int64_t>(top_k_, n_blocks); ++i) {
      none *= std::max<double>(0.0, static_cast<double>(n_blocks - m - i)) /
              static_cast<double>(n_blocks - i);
    }
    chance_sum_ += 1.0 - none;
  }
}

std::vector<EvidenceHeads::Head> EvidenceHeads::Ranked() const {
  std::vector<Head> heads;
  for (int l = 0; l < n_layers_; ++l) {
    for (int h = 0; h < n_heads_; ++h) {
      const int64_t hits = hits_[static_cast<size_t>(l) * n_heads_ + h];
      heads.push_back({l, h, n_turns_ > 0 ? static_cast<double>(hits) / n_turns_ : 0.0});
    }
  }
  std::stable_sort(heads.begin(), heads.end(),
                   [](const Head& a, const Head& b) { return a.hit_rate > b.hit_rate; });
  return heads;
}

std::string EvidenceHeads::Markdown(int top) const {
  const std::vector<Head> heads = Ranked();
  double mean = 0;
  for (const Head& h : heads) mean += h.hit_rate;
  if (!heads.empty()) mean /= static_cast<double>(heads.size());
  char line[160];
  std::snprintf(line, sizeof(line),
                "Evidence turns with a block in a head's top %d by exact q.k (%lld turns of %lld "
                "questions; chance %.3f, mean over all %zu heads %.3f):\n\n",
                top_k_, static_cast<long long>(n_turns_), static_cast<long long>(n_questions_),
                chance(), heads.size(), mean);
  std::string out = line;
  out += "| layer | head | hit rate |\n|---:|---:|---:|\n";
  for (int i = 0; i < top && i < static_cast<int>(heads.size()); ++i) {
    std::snprintf(line, sizeof(line), "| %d | %d | %.3f |\n", heads[i].layer, heads[i].head,
                  heads[i].hit_rate);
    out += line;
  }
  return out;
}

}  // namespace kvmem::eval
