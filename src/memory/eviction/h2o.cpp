#include "memory/eviction/h2o.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace kvmem::memory {

int64_t H2oRecentRows(const H2oConfig& config) {
  const double r = std::round(static_cast<double>(config.budget) * config.recent_ratio);
  return std::clamp<int64_t>(static_cast<int64_t>(r), 0, std::max<int64_t>(config.budget, 0));
}

std::vector<int64_t> H2oKeep(std::span<const double> scores, int64_t budget, int64_t recent) {
  assert(0 <= recent && recent <= budget);
  const int64_t n = static_cast<int64_t>(scores.size());
  std::vector<int64_t> kept;
  if (n <= budget) {
    kept.resize(n);
    std::iota(kept.begin(), kept.end(), int64_t{0});
    return kept;
  }
  const int64_t older = n - recent;  // rows [0, older) compete for the heavy-hitter slots
  const int64_t heavy = budget - recent;
  kept.resize(older);
  std::iota(kept.begin(), kept.end(), int64_t{0});
  const auto heavier = [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a > b;
  };
  std::nth_element(kept.begin(), kept.begin() + heavy, kept.end(), heavier);
  kept.resize(heavy);
  for (int64_t i = older; i < n; ++i) kept.push_back(i);
  std::sort(kept.begin(), kept.end());
  return kept;
}

H2oPlan PlanH2o(const AttentionScores& scores, const kv::KvSequence& seq, int64_t n_candidates,
                const H2oConfig& config) {
  assert(scores.n_rows() >= n_candidates && config.budget >= 0);
  const int block_rows = seq.pool()->geometry().block_rows;
  const std::vector<int32_t> slot_of = BlockSlots(seq);
  const int64_t recent = H2oRecentRows(config);
  H2oPlan plan;
  plan.n_kv_heads = scores.n_kv_heads();
  const size_t n_lists = static_cast<size_t>(scores.n_layers()) * scores.n_kv_heads();
  plan.kept.resize(n_lists);
  plan.evicted.resize(n_lists);
  std::vector<int64_t> index;
  std::vector<kv::RowRef> refs;
  std::vector<double> cand;
  std::vector<char> keep;
  for (int l = 0; l < scores.n_layers(); ++l) {
    for (int g = 0; g < scores.n_kv_heads(); ++g) {
      index.clear();
      refs.clear();
      cand.clear();
      const std::span<const double> s = scores.of(l, g);
      for (const kv::ViewRun& run : seq.view().list(l, g)) {
        const int32_t slot = run.dead() ? -1 : slot_of[run.block];
        if (slot < 0) continue;
        for (int32_t j = 0; j < run.n_rows; ++j) {
          const int64_t i = int64_t{slot} * block_rows + run.first_row + j;
          if (i >= n_candidates) continue;
          index.push_back(i);
          refs.push_back({run.block, run.first_row + j});
          cand.push_back(s[i]);
        }
      }
      keep.assign(index.size(), 0);
      for (int64_t k : H2oKeep(cand, config.budget, recent)) keep[k] = 1;
      const size_t li = static_cast<size_t>(l) * plan.n_kv_heads + g;
      std::vector<EvictedRun>& ev = plan.evicted[li];
      for (size_t k = 0; k < index.size(); ++k) {
        if (keep[k]) {
          plan.kept[li].push_back(index[k]);
        } else if (!ev.empty() && ev.back().first.block == refs[k].block &&
                   ev.back().first.row + ev.back().n_rows == refs[k].row) {
          ++ev.back().n_rows;
        } else {
          ev.push_back({refs[k], 1});
        }
      }
      std::sort(plan.kept[li].begin(), plan.kept[li].end());
    }
  }
  return plan;
}

void ApplyH2o(const H2oPlan& plan, kv::KvSequence* seq) {
  for (size_t li = 0; li < plan.evicted.size(); ++li) {
    const int l = static_cast<int>(li / plan.n_kv_heads),
              g = static_cast<int>(li % plan.n_kv_heads);
    for (const EvictedRun& run : plan.evicted[li]) seq->view().Hide(run.first, run.n_rows, l, g);
  }
}

}  // namespace kvmem::memory
