#include "memory/retrieval/block_scoring.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

#include "kernels/block_max_dot.h"
#include "kernels/matmul.h"

namespace kvmem::memory {

std::string StrategyName(const RetrievalStrategy& s) {
  const char* score = s.block_score == BlockScore::kCentre  ? "-centre"
                      : s.block_score == BlockScore::kExact ? "-exact"
                                                            : "";
  return std::string(s.norm == ScoreNorm::kSoftmax ? "softmax" : "rr") +
         (s.agg == ScoreAgg::kSum ? "-sum" : "-max") + score;
}

Result<RetrievalStrategy> ParseStrategy(const std::string& name) {
  for (ScoreNorm n : {ScoreNorm::kSoftmax, ScoreNorm::kReciprocalRank}) {
    for (ScoreAgg a : {ScoreAgg::kSum, ScoreAgg::kMax}) {
      for (BlockScore b : {BlockScore::kUpperBound, BlockScore::kCentre, BlockScore::kExact}) {
        RetrievalStrategy s;
        s.norm = n;
        s.agg = a;
        s.block_score = b;
        if (StrategyName(s) == name) return s;
      }
    }
  }
  return InvalidArgument(
      "unknown retrieval strategy '" + name +
      "' (softmax-sum, softmax-max, rr-sum, rr-max; -centre for centre scores, -exact for "
      "exact ones)");
}

void BlockUpperBounds(const BlockIndex& index, int layer, const float* q, int n_tokens, int n_heads,
                      float scale, ThreadPool* pool, std::vector<float>* bounds,
                      BlockScore block_score) {
  const int n_kv = index.n_kv_heads();
  const int hd = index.head_dim();
  assert(n_heads % n_kv == 0);
  const int group = n_heads / n_kv;
  const int64_t n_blocks = index.n_blocks();
  const int64_t n_rows = static_cast<int64_t>(n_tokens) * n_heads;
  bounds->assign(static_cast<size_t>(n_rows * n_blocks), 0.0f);
  if (n_blocks == 0 || n_tokens == 0) return;
  // Per KV head: x (n_tokens * group, 2 * hd) = scale * (min(q, 0), max(q, 0)) of its Q heads,
  // so that x . [min | max] = scale * sum_i max(q_i min_i, q_i max_i) (Eq. 3); for the centre,
  // x = scale * (q / 2, q / 2).
  const bool centre = block_score == BlockScore::kCentre;
  std::vector<float> x(static_cast<size_t>(n_tokens) * group * 2 * hd);
  std::vector<float> y(static_cast<size_t>(n_tokens) * group * n_blocks);
  for (int g = 0; g < n_kv; ++g) {
    for (int t = 0; t < n_tokens; ++t) {
      for (int j = 0; j < group; ++j) {
        const float* qr = q + (static_cast<size_t>(t) * n_heads + g * group + j) * hd;
        float* xr = x.data() + (static_cast<size_t>(t) * group + j) * 2 * hd;
        for (int d = 0; d < hd; ++d) {
          xr[d] = scale * (centre ? 0.5f * qr[d] : std::fmin(qr[d], 0.0f));
          xr[hd + d] = scale * (centre ? 0.5f * qr[d] : std::fmax(qr[d], 0.0f));
        }
      }
    }
    const std::span<const uint16_t> boxes = index.HeadBoxes(layer, g);
    kernels::WeightMatrix w;
    w.type = DType::kF16;
    w.data = boxes.data();
    w.n_in = 2 * hd;
    w.n_out = n_blocks;
    w.row_bytes = 2 * static_cast<size_t>(hd) * sizeof(uint16_t);
    kernels::MatMul(w, x.data(), static_cast<int64_t>(n_tokens) * group, y.data(), pool);
    for (int t = 0; t < n_tokens; ++t) {
      for (int j = 0; j < group; ++j) {
        const float* src = y.data() + (static_cast<size_t>(t) * group + j) * n_blocks;
        float* dst = bounds->data() + (static_cast<size_t>(t) * n_heads + g * group + j) * n_blocks;
        std::copy(src, src + n_blocks, dst);
      }
    }
  }
}

void BlockExactScores(std::span<const float> keys, int n_kv_heads, int head_dim, int block_size,
                      const float* q, int n_tokens, int n_heads, float scale, ThreadPool* pool,
                      std::vector<float>* scores) {
  assert(n_heads % n_kv_heads == 0 && block_size > 0);
  const int group = n_heads / n_kv_heads;
  const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
  const int64_t n_keys = static_cast<int64_t>(keys.size()) / kv_dim;
  const int64_t n_blocks = (n_keys + block_size - 1) / block_size;
  const int64_t n_rows = static_cast<int64_t>(n_tokens) * n_heads;
  scores->assign(static_cast<size_t>(n_rows * n_blocks), -INFINITY);
  if (n_blocks == 0 || n_tokens == 0) return;
  // Per KV head: its Q heads' rows (scaled) against every block of its keys, in one pass over
  // the keys (kernels/block_max_dot.h), blocks split across the threads.
  const int64_t x_rows = static_cast<int64_t>(n_tokens) * group;
  std::vector<float> x(static_cast<size_t>(x_rows) * head_dim);
  std::vector<float> y(static_cast<size_t>(x_rows) * n_blocks);
  for (int g = 0; g < n_kv_heads; ++g) {
    for (int t = 0; t < n_tokens; ++t) {
      for (int j = 0; j < group; ++j) {
        const float* qr = q + (static_cast<size_t>(t) * n_heads + g * group + j) * head_dim;
        float* xr = x.data() + (static_cast<size_t>(t) * group + j) * head_dim;
        for (int d = 0; d < head_dim; ++d) xr[d] = scale * qr[d];
      }
    }
    auto blocks = [&](int64_t b0, int64_t b1) {
      kernels::BlockMaxDot(x.data(), x_rows, head_dim,
                           keys.data() + static_cast<size_t>(g) * head_dim, kv_dim, n_keys,
                           block_size, b0, b1, y.data(), n_blocks);
    };
    if (pool != nullptr) {
      pool->ParallelFor(n_blocks, std::max<int64_t>(1, n_blocks / (8 * pool->size())), blocks);
    } else {
      blocks(0, n_blocks);
    }
    for (int t = 0; t < n_tokens; ++t) {
      for (int j = 0; j < group; ++j) {
        const float* src = y.data() + (static_cast<size_t>(t) * group + j) * n_blocks;
        float* dst = scores->data() + (static_cast<size_t>(t) * n_heads + g * group + j) * n_blocks;
        std::copy(src, src + n_blocks, dst);
      }
    }
  }
}

namespace {

// Block indices of one row sorted by descending bound, ties by index.
void RankOrder(const float* row, int64_t n, std::vector<int64_t>* order) {
  order->resize(n);
  std::iota(order->begin(), order->end(), 0);
  std::stable_sort(order->begin(), order->end(),
                   [row](int64_t a, int64_t b) { return row[a] > row[b]; });
}

}  // namespace

std::vector<double> AggregateScores(std::span<const float> bounds, int64_t n_rows, int64_t n_blocks,
                                    const RetrievalStrategy& strategy) {
  assert(bounds.size() == static_cast<size_t>(n_rows * n_blocks));
  std::vector<double> score(n_blocks, strategy.agg == ScoreAgg::kMax ? -INFINITY : 0.0);
  std::vector<double> norm(n_blocks);
  std::vector<int64_t> order;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = bounds.data() + r * n_blocks;
    if (strategy.norm == ScoreNorm::kSoftmax) {
      const float mx = *std::max_element(row, row + n_blocks);
      double sum = 0.0;
      for (int64_t b = 0; b < n_blocks; ++b) {
        norm[b] = std::exp(static_cast<double>(row[b]) - mx);
        sum += norm[b];
      }
      for (double& v : norm) v /= sum;
    } else {
      RankOrder(row, n_blocks, &order);
      for (int64_t rank = 0; rank < n_blocks; ++rank) {
        norm[order[rank]] = 1.0 / (static_cast<double>(rank + 1) + strategy.rr_c);
      }
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      score[b] = strategy.agg == ScoreAgg::kSum ? score[b] + norm[b] : std::max(score[b], norm[b]);
    }
  }
  if (n_rows == 0) std::fill(score.begin(), score.end(), 0.0);
  return score;
}

std::vector<int64_t> TopKChronological(std::span<const double> scores, int64_t k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  k = std::clamp<int64_t>(k, 0, n);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int64_t> TopKWithNeighbors(std::span<const double> scores, int64_t k, int neighbors,
                                       std::span<const BlockSpan> spans) {
  const int64_t n = static_cast<int64_t>(scores.size());
  assert(spans.empty() || static_cast<int64_t>(spans.size()) == n);
  k = std::clamp<int64_t>(k, 0, n);
  if (neighbors <= 0 || k == n) return TopKChronological(scores, k);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<char> taken(n, 0);
  std::vector<int64_t> out;
  auto take = [&](int64_t b, BlockSpan span) {
    if (b < span.first || b > span.second || taken[b] || static_cast<int64_t>(out.size()) == k) {
      return;
    }
    taken[b] = 1;
    out.push_back(b);
  };
  for (size_t i = 0; i < order.size() && static_cast<int64_t>(out.size()) < k; ++i) {
    const int64_t b = order[i];
    BlockSpan span{0, n - 1};
    if (!spans.empty()) {
      span.first = std::max<int64_t>(span.first, spans[b].first);
      span.second = std::min<int64_t>(span.second, spans[b].second);
    }
    take(b, {b, b});
    for (int d = 1; d <= neighbors; ++d) {
      take(b + d, span);
      take(b - d, span);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvmem::memory
