// The `h2o` memory policy: the `full` cache (prefix matching over the conversation), with H2O's
// eviction (h2o.h) as an agent's KV budget. Every prefilled prompt token's attention is
// accumulated per (layer, KV head) (attention_scores.h); after a turn's prompt is prefilled
// (all but its last token), each (layer, KV head) keeps `budget` of the rows before the turn
// (half the most recent, half the heaviest hitters, H2oConfig) and the turn's own rows, and the
// reply decodes over those. Eviction is permanent and hides rows from a list, it does not free
// them: the cache keeps every row at its position, so the next turn's prompt still matches the
// cached prefix, and the rows each token reads stay bounded by budget + the turn. (H2O evicts
// once per generated token; here once per turn, before the reply, as the LoCoMo evaluation ran
// it; reply tokens are not scored. Abort puts the evicted rows back.) The state (scores and evicted rows) persists with the cache.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>

#include "memory/eviction/attention_scores.h"
#include "memory/eviction/h2o.h"
#include "memory/full/full_policy.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {

PolicyKind H2oPolicyKind();

class H2oPolicy : public FullPolicy {
 public:
  static Result<std::unique_ptr<H2oPolicy>> Make(const PolicyEnv& env, const Json& config,
                                                 kv::KvPool* pool, StoredMemory stored);

  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  // {"kept": [[begin, end, ...] per (layer, KV head)]}: the history rows (storage indices) the
  // last turn's lists kept.
  Json Detail() const override;
  PersistedMemory Persist() const override;

 private:
  H2oPolicy(const PolicyEnv& env, kv::KvPool* pool, H2oConfig config, StoredMemory stored);
  // The rows a (layer, KV head) list does not read, as storage-index ranges [begin, end).
  std::vector<std::pair<int64_t, int64_t>> Evicted(int layer, int head) const;
  Status RestoreState(const Json& state);

  H2oConfig config_;
  AttentionScores scores_;
  // The open turn's: the scores and (layer, KV head) lists before it; the rows its lists kept.
  AttentionScores saved_scores_;
  std::vector<std::vector<kv::ViewRun>> saved_lists_;
  std::vector<std::vector<int64_t>> kept_;
  Json state_;  // Persist's, rebuilt at each Commit
};

}  // namespace kvmem::memory
