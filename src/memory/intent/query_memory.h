// IntentKV's cross-turn intent (intentkv.txt §3.2): per session, a QueryMemory M with the shape
// of one post-RoPE query row of every layer and head, updated once per turn by Eq. 2,
//   M_t = e^{-λ} M_{t-1} + Enc(q_t),   then each (layer, head) row projected to unit norm,
// where Enc(q_t) is the mean post-RoPE Q row of the turn's actionable span; and the rule score
// of Eq. 3 that ranks history rows against it,
//   rule_j = Σ_{l,h} softmax_{i ∈ H}(M[l,h] · K[l,g(h),i] / √D)_j
// over the candidate rows H, KV heads expanded to query heads under GQA (g(h) = h / group).
// Sessions are kept in an LRU of 1,024 (the paper's appendix A).
// Thread-safety: QueryMemory is a plain value; RuleScores reads the pool and parallelizes over
// layers with the ThreadPool.
#pragma once

#include <cstdint>
#include <list>
#include <nlohmann/json.hpp>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_sequence.h"
#include "model/model_spec.h"

namespace kvmem::memory {

class QueryMemory {
 public:
  static constexpr size_t kSessions = 1024;

  // Rows of (n_layers, n_heads, head_dim).
  QueryMemory(int n_layers, int n_heads, int head_dim, size_t capacity = kSessions);

  size_t row_size() const { return static_cast<size_t>(n_layers_) * n_heads_ * head_dim_; }
  size_t size() const { return order_.size(); }
  // The session's memory (n_layers, n_heads, head_dim), or empty when it has none; marks the
  // session used.
  std::span<const float> Find(uint64_t session);
  // Eq. 2 with enc = Enc(q_t) (row_size()); a new session starts from M_{-1} = 0. Evicts the
  // least recently used session beyond the capacity. Returns the new memory.
  std::span<const float> Update(uint64_t session, std::span<const float> enc, double lambda);
  // Puts a session back as it was (an aborted turn): `before` empty forgets it.
  void Restore(uint64_t session, std::span<const float> before);

  // {"sessions": [{"key": "<hex>", "m": base64 f32}, ...]} least recently used first.
  nlohmann::json ToJson() const;
  Status FromJson(const nlohmann::json& j);

 private:
  using Entry = std::pair<uint64_t, std::vector<float>>;
  void Put(uint64_t session, std::vector<float> m);

  int n_layers_, n_heads_, head_dim_;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used last
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
};

// Eq. 3 for the candidate rows (storage indices of seq) against memory (n_layers, n_heads,
// head_dim_k): one score per candidate, in candidates' order. Layers with a sliding window are
// left out (their rows beyond the window are unread, and may hold no storage).
std::vector<double> RuleScores(const kv::KvSequence& seq, std::span<const int64_t> candidates,
                               std::span<const float> memory, const model::ModelSpec& spec,
                               ThreadPool* pool);

}  // namespace kvmem::memory
