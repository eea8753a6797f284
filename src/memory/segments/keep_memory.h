// KEEP's memory (Yang et al., 2025, §4.1-4.2): named text segments that change step by step,
// their KV caches, and the answer to a query over them.
//
// Static-dynamic construction (§4.1). Segments are clustered into groups by their sentence
// embeddings (k-means, k = ceil(n / group_size), once the first query comes; later segments join
// the group of the nearest centroid). A group is static when none of its segments changed in
// the last `static_after` steps (t), dynamic otherwise. A static group's KV is computed jointly,
// its segments one after another with full attention between them; a dynamic group's segments
// each have a cache of their own. A write to a segment of a static group makes the group
// dynamic at once (its members get caches of their own); a dynamic group quiet for t steps
// becomes static when the next query comes (one joint prefill). Every cache is computed after
// the same prefix (the system header), at the positions right after it.
//
// Retrieval: with top_k > 0, static groups are scored as a whole (their best member's cosine to
// the query), dynamic segments one by one, and units are taken best first until top_k segments
// are in; 0 reads every segment. Chosen units are placed in memory order.
//
// Answer: the prefix, the chosen caches at fresh positions and the query, with the recompute
// rule of blend.h. A step ends with EndStep (the query's turn is over). Answer refreshes the
// caches first; a caller with time between steps (the robot acting, the reply streamed) calls
// Refresh right after EndStep, so a group's promotion to static is off the next query's path.
//
// The ablation "without static-dynamic construction" is static_dynamic = false: every segment
// is always a unit of its own.
//
// Thread-safety: not thread-safe; the caller holds the compute lock around Put, Refresh and
// Answer (they run forward passes).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "memory/segments/blend.h"
#include "model/model.h"

namespace kvmem::memory::segments {

struct KeepConfig {
  int top_k = 0;                  // segments a query reads; 0: all
  double recompute_ratio = 0.15;  // r: mean share of segment tokens recomputed per layer
  int static_after = 10;          // t: steps without a change before a group is static
  int group_size = 8;             // mean segments per group (k-means k = ceil(n / group_size))
  bool static_dynamic = true;     // false: every segment a unit of its own (ablation)
  RecomputeRule rule = RecomputeRule::kMultiHop;
  bool query_source = false;  // BlendOptions::query_source
  bool debias = false;        // BlendOptions::debias
};

// One segment as a client sees it.
struct SegmentInfo {
  std::string name;
  std::string text;
  int group = -1;          // -1 until grouped
  bool is_static = false;  // its group is static (its KV computed with the group's)
  int64_t changed_step = 0;
  int64_t tokens = 0;
};

// What building caches cost since the last call of TakeEncoded.
struct EncodeCost {
  int64_t tokens = 0;  // tokens prefilled into segment and group caches
  int64_t units = 0;   // caches computed
};

class KeepMemory {
 public:
  KeepMemory(const model::Model& model, ThreadPool* threads, kv::KvPool* pool, KeepConfig config);
  ~KeepMemory();
  KeepMemory(const KeepMemory&) = delete;
  KeepMemory& operator=(const KeepMemory&) = delete;

  // The header every cache follows (the chat template's system opening). Changing it recomputes
  // every cache on the next Refresh.
  Status SetPrefix(std::span<const int32_t> tokens);
  std::span<const int32_t> prefix() const { return prefix_tokens_; }

  // Adds or replaces a segment (tokens as they will be placed; embedding: unit vector, may be
  // empty when top_k == 0 and static_dynamic is off). Its KV is computed now; on error the
  // memory is as it was.
  Status Put(std::string_view name, std::string_view text, std::vector<int32_t> tokens,
             std::vector<float> embedding);
  // NotFound when there is no such segment.
  Status Remove(std::string_view name);

  // Brings every cache up to the current step (grouping, static transitions, caches a new
  // prefix dropped).
  Status Refresh();
  // Refresh, retrieval and the blend of blend.h. query_embedding as Put's (empty: top_k ignored).
  Result<BlendResult> Answer(std::span<const int32_t> query,
                             std::span<const float> query_embedding);
  // The query's step is over: the next writes and query belong to the next step.
  void EndStep() { ++step_; }

  int64_t step() const { return step_; }
  const KeepConfig& config() const { return config_; }
  std::vector<SegmentInfo> List() const;
  std::optional<SegmentInfo> Find(std::string_view name) const;
  size_t size() const { return segments_.size(); }
  // Tokens of all segments (what reading every one places).
  int64_t segment_tokens() const;
  // Names of the segments the last Answer read, in placement order, and of those still
  // recomputed in its last layer.
  const std::vector<std::string>& last_read() const { return last_read_; }
  const std::vector<std::string>& last_recomputed() const { return last_recomputed_; }
  EncodeCost TakeEncoded();

  // Persistence: every cache's rows in one sequence (the prefix's first), their tokens, and the
  // state that names them. Restore takes what Persist gave (rows loaded into `pool`).
  struct Persisted {
    std::unique_ptr<kv::KvSequence> rows;
    std::vector<int32_t> tokens;
    nlohmann::json state;
  };
  Result<Persisted> Persist() const;
  static Result<std::unique_ptr<KeepMemory>> Restore(const model::Model& model, ThreadPool* threads,
                                                     kv::KvPool* pool, KeepConfig config,
                                                     std::unique_ptr<kv::KvSequence> rows,
                                                     std::span<const int32_t> tokens,
                                                     const nlohmann::json& state);

 private:
  // Rows of one or more segments: own rows [first_row, first_row + tokens) of `rows`.
  struct Cache {
    std::shared_ptr<const kv::KvSequence> rows;
    int64_t first_row = 0;
  };
  struct Segment {
    std::string name;
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<float> embedding;
    int64_t changed_step = 0;
    int group = -1;
    std::shared_ptr<Cache> cache;  // its own (dynamic), or null while its static group's holds it
  };
  struct Group {
    std::vector<float> centroid;
    bool is_static = false;
    std::shared_ptr<Cache> cache;  // static: the members' tokens one after another
    std::vector<int> members;      // static: indices into segments_, in memory order
  };

  int Index(std::string_view name) const;
  // Every cache in use, with its rows.
  std::vector<std::pair<std::shared_ptr<Cache>, int64_t>> LiveCaches() const;
  // Copies the live caches into a new packed sequence once dead rows (replaced or removed
  // segments, groups gone dynamic) outnumber the live ones; out of memory it keeps the old.
  void Compact();
  Result<std::shared_ptr<Cache>> Encode(std::span<const int32_t> tokens);
  Status GroupSegments();
  bool QuietFor(const Group& g) const;
  // A static group becomes dynamic: every member but `skip` gets a cache of its own; on error
  // nothing changes.
  Status MakeDynamic(Group* g, int skip = -1);
  std::vector<PlacedSegment> Retrieve(std::span<const float> query_embedding,
                                      std::vector<int>* order) const;

  const model::Model& model_;
  ThreadPool* threads_;
  kv::KvPool* pool_;
  KeepConfig config_;
  std::vector<int32_t> prefix_tokens_;
  std::unique_ptr<kv::KvSequence> prefix_rows_;
  // Every cache's rows, packed one after another (Encode appends, Compact drops dead ones).
  std::shared_ptr<kv::KvSequence> packed_;
  std::vector<Segment> segments_;  // memory order
  std::vector<Group> groups_;
  bool grouped_ = false;
  int64_t step_ = 0;
  EncodeCost encoded_;
  std::vector<std::string> last_read_;
  std::vector<std::string> last_recomputed_;
};

}  // namespace kvmem::memory::segments
