// Block prefill under a fixed budget (EpiCache §2.2-2.3, Eq. 3; papers/epicache.txt and the
// official apple/ml-epicache): a history is prefilled M_block tokens at a time over a
// compressed cache (compressed_cache.h); after each block every candidate row (the cache's and
// the block's) is scored, each (layer, KV head) keeps its best rows and the rest are dropped,
// so the rows held never exceed the budget plus one block.
//
// Scores (RowScore), as the paper adapts each method to block prefill (§4.1, appendix A.2):
//   kPromptAttention  Eq. 3's s_max: the largest softmax weight any token of a patched prompt
//                     (run after the block, then dropped) and any query head of the KV head's
//                     group gives the row. EpiCache (the episode's medoid), InfiniPot (a generic
//                     prompt), SnapKV (the block's own last 64 tokens as the prompt, as the
//                     paper adapts it: `window_prompt`).
//   kKeyDiff          the negative cosine of the row's key with the mean key of the candidates
//                     (KeyDiff's anchor), per (layer, KV head).
//   kRecency          the most recent rows, after the `sinks` first ones (StreamingLLM).
// Budgets (HeadBudget): kUniform keeps layer_rows[l] rows in each KV head; kPair (the official
// code's default, "head-wise non-uniform selection" after Ada-KV) keeps the layer's best
// layer_rows[l] * n_kv_heads rows over all its heads, so heads keep different counts (at most
// the region's capacity each). The history's first keep_first rows (the system prompt) are always
// kept, outside the budget. Ties keep the more recent row.
// The first rows are told by rank, not by position: they are kept, so they stay the first
// entries of every (layer, KV head) list, while Replace moves them to compact positions near the
// end of the region (a rank below keep_first is a position below it until then).
// Sliding-window layers keep the rows the next token can still read (the last window
// positions), unscored: no later token reads the others.
// Thread-safety: not thread-safe; the ThreadPool parallelizes inside.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "memory/episodic/compressed_cache.h"
#include "model/model.h"

namespace kvmem::memory {

enum class RowScore { kPromptAttention, kKeyDiff, kRecency };
enum class HeadBudget { kUniform, kPair };

struct CompressionConfig {
  std::vector<int64_t> layer_rows;  // (n_layers) rows kept per KV head (global layers)
  HeadBudget heads = HeadBudget::kUniform;
  RowScore score = RowScore::kPromptAttention;
  int64_t keep_first = 0;      // the history's first rows, always kept (outside the budget)
  int64_t sinks = 0;           // kRecency: the history's first rows kept within the budget
  int window_prompt = 0;       // > 0: the patched prompt is the block's last tokens (SnapKV)
  int max_batch = 256;         // prefill micro-batch
  std::mutex* lock = nullptr;  // BuildCompressedCache: held around each block's passes
};

// The region capacity a config needs: the largest layer budget (kPair: times the KV heads)
// plus keep_first, and every sliding window.
int64_t RegionCapacity(const model::ModelSpec& spec, const CompressionConfig& config);

// Scores of the candidate rows of one compression step, per (layer, KV head): index i below the
// cache's kept count of (l, g) is its slot i, then the tail rows [tail_first, n_rows) in order.
struct CandidateScores {
  int n_kv_heads = 0;
  std::vector<std::vector<float>> of;  // (n_layers * n_kv_heads)
};

// Prefills `tokens` at positions first_pos.. over the cache and the tail (SetView), appending
// their rows to seq (window release must be off). logits (may be null) of the last token.
Status PrefillOverCache(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                        const CompressedCache& cache, int64_t tail_first,
                        std::span<const int32_t> tokens, int64_t first_pos, int max_batch,
                        std::vector<float>* logits = nullptr);

// Scores the candidates as `config` says (kPromptAttention runs `prompt` after the tail and
// drops its rows), keeps each (layer, KV head)'s best, and writes them into the cache's region
// in position order (rows copied in place; the tail rows are left for the caller to drop).
// next_pos: the position after the tail. On error before the copy the cache is unchanged.
Status CompressTail(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                    CompressedCache* cache, int64_t tail_first, int64_t next_pos,
                    std::span<const int32_t> prompt, const CompressionConfig& config);

// Block prefill of a whole history: `tokens` at positions first_pos.. in blocks of `block`
// tokens, each prefilled over the cache, compressed into it (with `prompt`, or the block's last
// config.window_prompt tokens) and dropped: each block's rows are appended past every row of seq
// (other caches' regions may follow this one) and truncated away.
// When the next position would pass max_pos, the kept rows are first re-placed (Replace).
// progress (may be empty) gets tokens done of the total.
Status BuildCompressedCache(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                            CompressedCache* cache, std::span<const int32_t> tokens,
                            int64_t first_pos, int64_t block, std::span<const int32_t> prompt,
                            const CompressionConfig& config, int64_t max_pos = INT64_MAX,
                            const std::function<void(int64_t, int64_t)>& progress = {});

// Re-places the cache's kept rows at compact positions ending at its capacity: slot j of
// (l, g) moves to capacity - n(l, g) + j (keys re-rotated, per KV head, by the difference; the
// storage format's rounding is the only loss), so the order and the recency of what is kept
// stay and the next position becomes the capacity. For histories that outgrow the context.
void Replace(const model::Model& model, kv::KvSequence* seq, CompressedCache* cache);

}  // namespace kvmem::memory
