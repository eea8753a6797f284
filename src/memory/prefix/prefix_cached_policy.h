// The memory of a turn that names no agent when the runtime has a prefix cache: the `none`
// policy's contract (the turn keeps nothing of its own: every call sees a fresh memory) with the
// prompt's longest cached prefix of the same tenant read from the shared PrefixCache instead of
// prefilled. One object per turn, created by AgentRuntime for key == nullptr; not in the policy
// table (agents cannot choose it: their memory is their own pool).
//
// A turn: Plan tokenizes the whole prompt (as `none` does, so the rows are the same tokens at the
// same positions); Apply matches at most all but the last prompt token (the last one is always
// prefilled: its logits start the reply), locks the match and prefills the rest after it; the
// reply decodes on the turn's sequence; Commit gives the prompt's and the reply's rows to the
// cache; Abort frees them. The logits are those of a run without the cache: the cached rows are
// the same tokens computed at the same positions by the same model, and neither the forward pass
// nor the attention kernels depend on how rows are split into blocks or batches
// (tests/memory/prefix/prefix_cache_model_test.cpp checks them bit for bit).
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memory/policy/memory_policy.h"
#include "memory/prefix/prefix_cache.h"

namespace kvmem::memory {

class PrefixCachedPolicy final : public MemoryPolicy {
 public:
  // cache outlives the policy; reserve_rows: rows the turn may append beyond its prompt (reply,
  // forks of n > 1 choices).
  PrefixCachedPolicy(const PolicyEnv& env, prefix::PrefixCache* cache, std::string tenant,
                     int64_t reserve_rows);
  ~PrefixCachedPolicy() override;

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  bool CanStep() const override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  // rows: the open turn's sequence (matched prefix + own rows; forks of n > 1 read it), else an
  // empty one. tokens: the ids of every row it reads.
  PersistedMemory Persist() const override;
  Json Report() const override { return report_; }
  std::string_view text() const override { return {}; }
  std::span<const int32_t> context_tokens() const override { return tokens_; }
  // The turn keeps nothing of its own (the cache's rows are the cache's).
  int64_t n_rows() const override { return 0; }
  size_t bytes_in_use() const override { return 0; }

 private:
  const PolicyEnv& env_;
  prefix::PrefixCache* cache_;
  std::string tenant_;
  int64_t reserve_rows_;
  std::unique_ptr<prefix::PrefixTurn> turn_;
  std::unique_ptr<kv::KvSequence> empty_;  // what Persist shows between turns
  std::vector<int32_t> tokens_;            // ids of the turn's rows, position order
  Json report_;
};

}  // namespace kvmem::memory
