// MemArt's retrieval scores (../shared/papers/memart.txt §3.2.2): how strongly the query tokens
// of a new request point at each memory block of one layer, and which blocks to take.
//
//   1. Eq. 3, per query row q (one token's one Q head) and block K: the upper bound
//      I(q, K) = sum_i max(q_i s_i^max(K), q_i s_i^min(K)) of q . k over the block's keys, against
//      the box of q's own KV head (GQA: head h reads KV head h / (n_heads / n_kv_heads)). Scores
//      are in attention-logit units, i.e. times the layer's attention scale (1/sqrt(head_dim)),
//      so the softmax of step 2 sees what the model's attention would.
//   2. Eq. 4 with Table 1: per query row, normalize across the blocks (Softmax, or Reciprocal
//      Rank 1 / (rank + c) with rank 1 for the highest bound), then aggregate across the rows
//      (Sum or Max).
//   3. The top-k blocks by that score, returned in chronological (index) order.
// Deviation, off by default (BlockScore::kCentre): score a block by q . c, its box's centre
// c = (min + max) / 2, instead of the bound. Eq. 3 is q . c + sum_i |q_i| w_i / 2 (w the box's
// width); on SmolLM2 the width term dominates and picks the widest boxes whatever the query
// (docs/eval/memart.md). The centre keeps only the query-dependent term.
// Ceiling, off by default (BlockScore::kExact): the relevance Eq. 3 bounds, the exact maximum
// of q . k over the block's keys (ArkVale's definition), from the keys themselves. It reads every
// history key of the layer per request, so it measures what the box costs in retrieval quality;
// it is not the compressed index the paper builds.
// Ties rank the earlier block first, so results are deterministic.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "memory/retrieval/block_index.h"

namespace kvmem::memory {

enum class ScoreNorm { kSoftmax, kReciprocalRank };
enum class ScoreAgg { kSum, kMax };

enum class BlockScore { kUpperBound, kCentre, kExact };

struct RetrievalStrategy {
  ScoreNorm norm = ScoreNorm::kSoftmax;
  ScoreAgg agg = ScoreAgg::kSum;
  double rr_c = 60.0;  // Reciprocal Rank's constant (Cormack et al.'s RRF default)
  BlockScore block_score = BlockScore::kUpperBound;
};

// "softmax-sum", "softmax-max", "rr-sum", "rr-max" (Eq. 3), each with "-centre" for kCentre and
// "-exact" for kExact.
std::string StrategyName(const RetrievalStrategy& s);
Result<RetrievalStrategy> ParseStrategy(const std::string& name);

// Eq. 3 for every query row and block of `layer`: bounds (n_tokens * n_heads, n_blocks), row
// t * n_heads + h. q: (n_tokens, n_heads, head_dim) position-free queries; n_heads a multiple
// of the index's n_kv_heads. The boxes are f16 and q is rounded to f16 for the product (the
// kernels' f16 dot), so a bound may fall short of the exact one by that rounding.
// With kCentre, the same for the centre score scale * q . (min + max) / 2.
void BlockUpperBounds(const BlockIndex& index, int layer, const float* q, int n_tokens, int n_heads,
                      float scale, ThreadPool* pool, std::vector<float>* bounds,
                      BlockScore block_score = BlockScore::kUpperBound);

// kExact for every query row and block: scores (n_tokens * n_heads, n_blocks), row
// t * n_heads + h, = scale * max over the block's keys of q . k. keys: (n_keys, n_kv_heads,
// head_dim) position-free, block b the keys [b * block_size, (b + 1) * block_size) (the last may
// be partial); q as for BlockUpperBounds. Products and sums in f32 (kernels::BlockMaxDot).
void BlockExactScores(std::span<const float> keys, int n_kv_heads, int head_dim, int block_size,
                      const float* q, int n_tokens, int n_heads, float scale, ThreadPool* pool,
                      std::vector<float>* scores);

// Eq. 4: one score per block from bounds (n_rows, n_blocks).
std::vector<double> AggregateScores(std::span<const float> bounds, int64_t n_rows, int64_t n_blocks,
                                    const RetrievalStrategy& strategy);

// The k highest-scoring blocks (all when k >= n), ascending.
std::vector<int64_t> TopKChronological(std::span<const double> scores, int64_t k);

// Deviation (MemArtConfig::neighbors): k blocks taken in score order, each bringing the blocks
// up to `neighbors` away on either side (nearest first, the one after before the one before)
// while fewer than k are taken, so a block found by the query is read with the text around it.
// Ascending; neighbors = 0 is TopKChronological.
// `spans` (empty, or one per block; MemArtConfig::turn_bounded): block b's neighbours come only
// from blocks spans[b].first..spans[b].second (the turns b overlaps), so that the budget goes to
// the turn a found block belongs to rather than to the turns beside it.
using BlockSpan = std::pair<int64_t, int64_t>;
std::vector<int64_t> TopKWithNeighbors(std::span<const double> scores, int64_t k, int neighbors,
                                       std::span<const BlockSpan> spans = {});

}  // namespace kvmem::memory
