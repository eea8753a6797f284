// Combining cached segments into one context and repairing the attention between them
// (KEEP §4.2, with CacheBlend and full reuse as the other rules):
//
//   1. The prefix's rows, then each placed segment's stored rows, are copied one after another
//      into a working sequence at fresh positions (keys re-rotated), layer by layer just before
//      the layer runs, and only the rows that layer does not recompute (the paper's "loading
//      only the non-recomputed KV"; kivi4 pools, whose keys are written without gaps, get every
//      row first).
//   2. One layer-stepped pass runs the segments' tokens and the query over it. Layer 0 computes
//      every token (r_0 = 1). After each layer the rule chooses which tokens go on being computed;
//      the others keep their cached rows in every later layer (engine::ForwardPass::KeepTokens:
//      a token not recomputed in layer i is not recomputed after it, the paper's observation).
//   3. The query's tokens are always computed; the reply decodes on the working sequence.
//
// Rules:
//   kMultiHop    KEEP: whole segments, chosen by multi-hop importance propagation over the layer's
//                attention (importance.h), per-layer ratios decreasing (RecomputeRatios)
//   kSingleHop   the ablation: whole segments by the query's attention only
//   kKvDeviation CacheBlend: tokens whose layer-0 K/V deviate most from their cached rows, one
//                fixed ratio in every later layer (FixedRecomputeRatios)
//   kNone        full reuse: nothing recomputed, only the query computed
// Both schedules average `ratio` over all layers (layer 0 included).
//
// Attention read for importance: every query token and up to kSourceTokens tokens of each
// candidate segment (evenly spaced), every query head; a segment's score is the mean weight per
// row it holds.
//
// Thread-safety: the caller holds the compute lock; the stored sequences are only read.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model.h"

namespace kvmem::memory::segments {

enum class RecomputeRule { kNone, kMultiHop, kSingleHop, kKvDeviation };

const char* RecomputeRuleName(RecomputeRule rule);

inline constexpr int kSourceTokens = 4;

// A segment to place: its rows are `cache`'s own rows [first_row, first_row + tokens.size()).
struct PlacedSegment {
  const kv::KvSequence* cache = nullptr;
  int64_t first_row = 0;
  std::span<const int32_t> tokens;
};

struct BlendOptions {
  RecomputeRule rule = RecomputeRule::kMultiHop;
  double ratio = 0.15;  // mean share of segment tokens computed per layer
  bool query_source = false;  // kMultiHop: the query a source of every round (importance.h)
  int max_batch = 256;        // RecomputeRule::kNone: the query's micro-batch
};

struct BlendStats {
  int64_t segment_tokens = 0;
  int64_t query_tokens = 0;
  std::vector<int64_t> computed;  // (n_layers) segment tokens computed in each layer
  std::vector<int> hops;          // (n_layers) propagation rounds after each layer (multi-hop)
  double place_ms = 0;            // copying stored rows into the working sequence
  double importance_ms = 0;       // reading attention and choosing (the taps)
  double total_ms = 0;            // the whole blend, logits included
  // Segment tokens computed over all layers / (segment tokens * layers).
  double computed_share() const;
};

struct BlendResult {
  // The prefix, the placed segments and the query, in that order of positions; owns its rows.
  std::unique_ptr<kv::KvSequence> working;
  int64_t next_pos = 0;       // where the reply's first token goes
  std::vector<float> logits;  // (n_vocab) after the query's last token
  BlendStats stats;
  std::vector<int> last_layer_segments;  // segments still computed in the last layer
};

// prefix: own rows [0, prefix_len) at positions 0..prefix_len-1. query must be non-empty.
Result<BlendResult> Blend(const model::Model& model, ThreadPool* pool, const kv::KvSequence& prefix,
                          int64_t prefix_len, std::span<const PlacedSegment> segments,
                          std::span<const int32_t> query, const BlendOptions& options);

}  // namespace kvmem::memory::segments
