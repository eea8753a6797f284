// H2O, the Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023): a KV cache of a fixed budget keeps
// the most recent rows and the "heavy hitters", the rows with the largest accumulated attention
// (the sum of the softmax weights every query so far gave the row; attention_scores.h). H2O
// decides per layer and per KV head, so each (layer, KV head) keeps its own set.
//
//   H2oKeep   the policy on one score vector: which of n rows (oldest first) to keep.
//   PlanH2o   the policy on every (layer, KV head) list of a sequence's view: the plan.
//   ApplyH2o  hides the evicted rows from those lists (KvView::Hide per head; the pool rows stay,
//             so a caller that saved the lists can put them back).
//
// Budget split: H2O's default gives half of the budget to recent rows and half to heavy hitters
// (H2oConfig::recent_ratio = 0.5). Ties between equal scores keep the more recent row.
// Thread-safety: pure functions; ApplyH2o mutates only the sequence it is given.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "memory/eviction/attention_scores.h"

namespace kvmem::memory {

struct H2oConfig {
  int64_t budget = 256;       // rows kept per (layer, KV head) among the candidates
  double recent_ratio = 0.5;  // share of the budget given to the most recent rows, in [0, 1]
};

// The recent part of the budget: round(budget * recent_ratio), within [0, budget].
int64_t H2oRecentRows(const H2oConfig& config);

// Indices (ascending) of the rows to keep among scores.size() rows in age order (index 0 the
// oldest): all of them when there are at most `budget`; else the last `recent` rows and the
// budget - recent highest-scoring rows before them, ties to the more recent row.
// Preconditions: 0 <= recent <= budget.
std::vector<int64_t> H2oKeep(std::span<const double> scores, int64_t budget, int64_t recent);

// A run of rows of one block evicted from a list.
struct EvictedRun {
  kv::RowRef first;
  int32_t n_rows = 0;
};

// Per (layer, KV head), index l * n_kv_heads + g.
struct H2oPlan {
  int n_kv_heads = 0;
  // Candidate rows kept, as storage indices of the sequence (attention_scores.h), ascending.
  std::vector<std::vector<int64_t>> kept;
  std::vector<std::vector<EvictedRun>> evicted;
  const std::vector<int64_t>& kept_of(int layer, int head) const {
    return kept[static_cast<size_t>(layer) * n_kv_heads + head];
  }
};

// Plans H2O over seq's view: in each (layer, KV head) list, the candidates are the live rows
// whose storage index is below n_candidates, in list order (the order of their positions); the
// other rows (e.g. the question being answered) are always kept and not counted in the budget.
// Preconditions: scores cover the candidates (scores.n_rows() >= n_candidates), budget >= 0.
H2oPlan PlanH2o(const AttentionScores& scores, const kv::KvSequence& seq, int64_t n_candidates,
                const H2oConfig& config);

// Hides every evicted run from its (layer, KV head) list.
void ApplyH2o(const H2oPlan& plan, kv::KvSequence* seq);

}  // namespace kvmem::memory
