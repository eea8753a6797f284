// The `epicache` memory policy (EpiCache, papers/epicache.txt; official code apple/ml-epicache):
// an agent's memory held to a fixed budget from its first token, as one compressed cache per
// *episode* of the conversation, and every request answered on the episode it belongs to.
//
//   history   the conversation as text, cut into utterances (each turn, and each chat message
//             within it) that are grouped `segment` at a time (§3.1)
//   episodes  the segments embedded (PolicyEnv::encoder, MiniLM) and clustered with k-means++
//             into E episodes (episodes.h); each episode's medoid segment(s) are its patched
//             prompt
//   caches    per episode a compressed cache (compressed_cache.h) built by block prefill of the
//             whole history, scored with that episode's prompt (block_compression.h): per layer
//             and KV head at most the layer's budget of rows (uniform by default, or the
//             paper's sensitivity-aware budgets, layer_budgets.h)
//   tail      the newest turns, uncompressed, until they fill a block
//
// A turn prefills only what its prompt adds, over the routed episode's cache and the tail: the
// request's focus (or the new text) is embedded and sent to the episode with the nearest centroid
// (§3.1 stage 3). Commit keeps the turn in the tail; a tail of `block` tokens is compressed into
// the episode nearest to its text (scored with that episode's prompt); once the history has grown
// `regroup` times since the last clustering the episodes are clustered anew and every cache is
// rebuilt from the history text (also when a client asks: Rebuild). Maintenance runs in Commit,
// after the reply, never before a request's first token; the report says what it cost.
//
// The same policy runs the paper's baselines (`scoring`): `generic` (InfiniPot's summarize
// prompt), `window` (SnapKV: the block's last 64 tokens as the prompt), `keydiff` and `recency`
// (StreamingLLM: `sinks` first rows and the latest), each one cache, no episodes.
//
// Rows keep their positions until the history nears the end of the context; then (or always,
// with positions = "compact") the kept rows are re-placed at compact positions (Replace).
// Persisted: every cache's rows (one sequence: the caches' regions, then the tail) and, as the
// policy's state, the kept positions, the episodes, their prompts and the utterance offsets.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memory/episodic/block_compression.h"
#include "memory/episodic/compressed_cache.h"
#include "memory/episodic/episodes.h"
#include "memory/policy/memory_policy.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {

PolicyKind EpiCachePolicyKind();

class EpiCachePolicy : public MemoryPolicy {
 public:
  static Result<std::unique_ptr<EpiCachePolicy>> Make(const PolicyEnv& env, const Json& config,
                                                      kv::KvPool* pool, StoredMemory stored);

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  bool CanStep() const override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  Result<Json> Rebuild() override;
  PersistedMemory Persist() const override;
  Json Report() const override { return report_; }
  // {"kept": [[begin, end, ...] per (layer, KV head)]}: the history positions the last turn read.
  Json Detail() const override;
  // Cached: the uncompressed tail; parts: the history's utterances, {"kind": "utterance",
  // "bytes", "segment", "episode": the episode its segment was clustered into, null when it came
  // after the last clustering}; a "note" saying so.
  Json Inspect() const override;
  std::string_view text() const override { return text_; }
  std::optional<std::string_view> client_conversation() const override { return std::nullopt; }
  std::span<const int32_t> context_tokens() const override { return context_; }
  int64_t n_rows() const override { return rows_->n_rows(); }
  size_t bytes_in_use() const override { return pool_->bytes_in_use(); }

  // The per-layer budgets the caches keep (rows per KV head; 0 for sliding-window layers).
  const std::vector<int64_t>& layer_rows() const { return compression_.layer_rows; }
  int n_episodes() const { return static_cast<int>(caches_.size()); }

 private:
  struct Settings;
  EpiCachePolicy(const PolicyEnv& env, kv::KvPool* pool);
  const Settings& settings() const { return *settings_; }
  bool episodic() const;
  // The episode whose centroid is nearest to the text's embedding (0 without episodes).
  int Route(std::string_view text) const;
  // The history's utterances as clean text (chat template markers dropped).
  std::vector<std::string> UtteranceTexts() const;
  // Clusters the history anew (episodic scoring) and rebuilds every cache from its text by block
  // prefill; the tail joins the caches.
  Status RebuildFromText();
  // The tail compressed into the cache nearest to it.
  Status CompressTailNow();
  // Re-places the caches' rows (and the tail's) at compact positions.
  void ReplaceAll();
  std::vector<int32_t> PromptFor(int cache) const;
  Status Maintain();
  Json TurnReport(const TurnPlan& plan) const;
  void UpdateState();
  Status RestoreState(const Json& state, std::vector<int32_t> tokens);
  int64_t ReplaceAt() const;  // the position past which kept rows are re-placed

  const PolicyEnv& env_;
  kv::KvPool* pool_;
  std::shared_ptr<const Settings> settings_;
  CompressionConfig compression_;
  int64_t capacity_ = 0;             // rows of each cache's region (whole blocks)
  std::vector<int64_t> layer_need_;  // (n_layers) rows each layer of a region can keep
  std::unique_ptr<kv::KvSequence> rows_;
  std::vector<CompressedCache> caches_;
  Episodes episodes_;
  std::vector<std::vector<int32_t>> prompts_;  // (caches_) episodic patched prompts
  CompressedCache empty_;                      // what a turn reads before any cache exists
  std::string text_;                           // the history
  std::vector<size_t> utterances_;             // where each utterance begins in text_
  int64_t tail_first_ = 0;                     // storage index of the tail's first row
  std::vector<int32_t> tail_tokens_;
  int64_t next_pos_ = 0;        // the position of the history's next token
  int64_t history_tokens_ = 0;  // tokens the history holds (as ingested)
  int64_t grouped_tokens_ = 0;  // history tokens at the last clustering
  // The open turn.
  int routed_ = -1;
  int64_t turn_first_row_ = -1;
  std::vector<int32_t> turn_tokens_;
  std::string turn_text_;
  std::vector<int32_t> context_;
  Json report_;
  Json maintenance_;  // what the last Commit or Rebuild did
  Json state_;
  mutable std::vector<int32_t> persist_tokens_;
};

}  // namespace kvmem::memory
