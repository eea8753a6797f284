#include "memory/eviction/attention_scores.h"

#include <algorithm>

namespace kvmem::memory {

void AttentionScores::Truncate(int64_t n) {
  if (n >= n_rows_) return;
  n_rows_ = std::max<int64_t>(n, 0);
  for (std::vector<double>& s : scores_) s.resize(static_cast<size_t>(n_rows_));
}

void AttentionScores::Set(int layer, int head, std::vector<double> values) {
  n_rows_ = static_cast<int64_t>(values.size());
  scores_[static_cast<size_t>(layer) * n_kv_heads_ + head] = std::move(values);
}

std::vector<int32_t> BlockSlots(const kv::KvSequence& seq) {
  std::vector<int32_t> slots(static_cast<size_t>(seq.pool()->max_blocks()), -1);
  for (size_t i = 0; i < seq.blocks().size(); ++i) {
    slots[seq.blocks()[i]] = static_cast<int32_t>(i);
  }
  return slots;
}

AttentionScores::AttentionScores(const model::ModelSpec& spec)
    : n_layers_(spec.n_layers),
      n_heads_(spec.n_heads),
      n_kv_heads_(spec.n_kv_heads),
      scores_(static_cast<size_t>(spec.n_layers) * spec.n_kv_heads) {}

void AttentionScores::Add(const engine::TapContext& tap, const kv::KvSequence& seq,
                          ThreadPool* pool) {
  const int block_rows = seq.pool()->geometry().block_rows;
  n_rows_ = std::max(n_rows_, seq.n_rows());
  for (std::vector<double>& s : scores_) s.resize(static_cast<size_t>(n_rows_), 0.0);
  const std::vector<int32_t> slot_of = BlockSlots(seq);
  const int group = n_heads_ / n_kv_heads_;
  const int n_tokens = tap.n_tokens();
  // (n_heads, n_rows): one sum per query head, its tokens added in batch order, then the heads
  // of a group in head order, so the result depends neither on the threads nor on scheduling.
  std::vector<double> per_head(static_cast<size_t>(n_heads_) * n_rows_, 0.0);
  pool->ParallelFor(n_heads_, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> weights;
    std::vector<kv::RowRef> rows;
    for (int64_t h = h0; h < h1; ++h) {
      double* dst = per_head.data() + static_cast<size_t>(h) * n_rows_;
      for (int t = 0; t < n_tokens; ++t) {
        tap.AttentionWeights(t, static_cast<int>(h), &weights, &rows);
        for (size_t i = 0; i < rows.size(); ++i) {
          const int32_t slot = slot_of[rows[i].block];
          if (slot >= 0) dst[int64_t{slot} * block_rows + rows[i].row] += weights[i];
        }
      }
    }
  });
  const int l = tap.layer();
  for (int h = 0; h < n_heads_; ++h) {
    std::vector<double>& s = scores_[static_cast<size_t>(l) * n_kv_heads_ + h / group];
    const double* src = per_head.data() + static_cast<size_t>(h) * n_rows_;
    for (int64_t r = 0; r < n_rows_; ++r) s[r] += src[r];
  }
}

void AttentionScores::AddWeight(int layer, int head, int64_t row, double w) {
  if (row >= n_rows_) {
    n_rows_ = row + 1;
    for (std::vector<double>& s : scores_) s.resize(static_cast<size_t>(n_rows_), 0.0);
  }
  scores_[static_cast<size_t>(layer) * n_kv_heads_ + head][row] += w;
}

Status ForwardScored(const model::Model& model, ThreadPool* pool, kv::KvSequence* seq,
                     std::span<const int32_t> tokens, int64_t first_pos, AttentionScores* scores,
                     int max_batch, std::vector<float>* logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("no tokens to evaluate");
  engine::ForwardPass fp(model, pool);
  fp.set_tap([&](const engine::TapContext& tap) { scores->Add(tap, *seq, pool); });
  for (int64_t begin = 0; begin < n; begin += max_batch) {
    const int64_t end = std::min(n, begin + max_batch);
    engine::Batch b;
    b.tokens.assign(tokens.begin() + begin, tokens.begin() + end);
    for (int64_t i = begin; i < end; ++i) b.positions.push_back(first_pos + i);
    KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
    while (!fp.done()) fp.StepLayer();
    // Persistent rows need no Finish (engine::Forward skips it too where no logits are needed).
    if (logits != nullptr && end == n) fp.Finish(logits);
  }
  return Status::Ok();
}

}  // namespace kvmem::memory
