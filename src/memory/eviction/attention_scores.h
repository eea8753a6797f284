// Accumulated attention of a sequence's rows, per layer and KV head: for row r of (layer l,
// KV head g), the sum over every query token a forward pass ran and over the query heads of g's
// group (GQA: head h reads KV head h / (n_heads / n_kv_heads)) of the softmax weight the token
// gave r in l. H2O's heavy-hitter score (h2o.h); a token's weights sum to 1 per query head, so
// the scores of (l, g) sum to tokens x group size.
//
// Rows are named by their storage index in the sequence: index i is row i % block_rows of block
// blocks()[i / block_rows] (KvSequence appends rows in that order). The weights are the
// model's own (engine::TapContext::AttentionWeights, read in each layer before its attention),
// so they cover exactly the rows each token read (its view list, causal by position).
//
//   AttentionScores scores(model.spec());
//   ForwardScored(model, pool, &seq, history, 0, &scores);  // rows + their scores
//
// Not thread-safe; Add parallelizes over tokens with the ThreadPool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::memory {

class AttentionScores {
 public:
  explicit AttentionScores(const model::ModelSpec& spec);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  // Rows covered: the sequence's rows at the last Add (rows never read score 0).
  int64_t n_rows() const { return n_rows_; }
  // (n_rows) scores of (layer, KV head), by storage index.
  std::span<const double> of(int layer, int head) const {
    return scores_[static_cast<size_t>(layer) * n_kv_heads_ + head];
  }

  // Forgets rows from n on (a cache cut back to n rows).
  void Truncate(int64_t n);
  // Replaces the scores of (layer, KV head): values.size() rows, the same for every list once
  // all are set (a restored state).
  void Set(int layer, int head, std::vector<double> values);

  // Adds the weights every token and query head of tap's batch gives the rows of seq it reads
  // in tap.layer(). seq is the sequence the pass runs over.
  void Add(const engine::TapContext& tap, const kv::KvSequence& seq, ThreadPool* pool);
  // Adds w to one row's score of (layer, head), covering the rows up to it: scores from another
  // source than a forward pass (a policy's own estimate, tests).
  void AddWeight(int layer, int head, int64_t row, double w);

 private:
  int n_layers_, n_heads_, n_kv_heads_;
  int64_t n_rows_ = 0;
  std::vector<std::vector<double>> scores_;  // (n_layers * n_kv_heads) x (n_rows)
};

// Block id -> its place in seq.blocks() (-1 for blocks of other sequences): storage index of
// row r is slots[r.block] * block_rows + r.row.
std::vector<int32_t> BlockSlots(const kv::KvSequence& seq);

// engine::Forward's micro-batched pass of `tokens` at positions first_pos.. over seq (rows
// appended and kept; same micro-batches, so the same K/V rows as Forward), with every layer's
// attention added to scores; logits (may be null) of the last token.
Status ForwardScored(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                     std::span<const int32_t> tokens, int64_t first_pos, AttentionScores* scores,
                     int max_batch = 256, std::vector<float>* logits = nullptr);

}  // namespace kvmem::memory
