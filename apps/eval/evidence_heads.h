// Which attention heads point at a question's evidence (`kvmem eval locomo --head-report K`).
// For every (layer, Q head), the share of evidence turns that have a memory block among the
// head's K highest blocks, blocks ranked by max over the question's tokens of the exact
// max q . k over the block's keys (the relevance MemArt's Eq. 3 bounds; BlockScore::kExact in
// memory/retrieval/block_scoring.h). Against chance, the share K random blocks would reach,
// this tells whether the model's attention can find the evidence at all, apart from how the
// blocks are compressed, scored across heads and aggregated.
//
//   EvidenceHeads tally(n_layers, n_heads, /*top_k=*/16);
//   per question: tally.AddLayer(l, scores, n_tokens, n_blocks, evidence) for each layer, then
//   tally.EndQuestion(evidence, n_blocks);  ...  tally.Ranked()
// Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "memory/retrieval/block_scoring.h"

namespace kvmem::eval {

// The memory blocks [first, last] of one evidence turn: memory::BlockSpan.
using memory::BlockSpan;

class EvidenceHeads {
 public:
  EvidenceHeads(int n_layers, int n_heads, int top_k);

  // One layer of one question: scores (n_tokens * n_heads, n_blocks), row t * n_heads + h, as
  // BlockExactScores gives them.
  void AddLayer(int layer, std::span<const float> scores, int n_tokens, int64_t n_blocks,
                std::span<const BlockSpan> evidence);
  // After the question's layers: counts its turns, and the chance that top_k random blocks of
  // n_blocks hold one of each turn's blocks.
  void EndQuestion(std::span<const BlockSpan> evidence, int64_t n_blocks);

  struct Head {
    int layer = 0, head = 0;
    double hit_rate = 0;  // share of evidence turns with a block in the head's top_k
  };
  // Every head, by descending hit rate (ties: lower layer, then head).
  std::vector<Head> Ranked() const;
  int top_k() const { return top_k_; }
  int64_t n_turns() const { return n_turns_; }
  int64_t n_questions() const { return n_questions_; }
  double chance() const { return n_turns_ > 0 ? chance_sum_ / n_turns_ : 0.0; }
  // A markdown table of the `top` best heads, with chance and the mean over all heads.
  std::string Markdown(int top) const;

 private:
  int n_layers_, n_heads_, top_k_;
  std::vector<int64_t> hits_;  // (n_layers * n_heads)
  int64_t n_turns_ = 0, n_questions_ = 0;
  double chance_sum_ = 0;
};

}  // namespace kvmem::eval
