// The `full` memory policy: the agent's rows are its conversation's KV cache (semantic.md
// §3.3). A turn gets the rendered prompt; the cached text is matched against it at character
// level (EXACT / EXTEND / DIVERGE, store/prefix_match.h), the matching stored tokens are kept
// (their ids, generated ones included, are never re-tokenized) and only the rest of the prompt
// is prefilled; a prompt that diverges below PolicyEnv::min_diverge_ratio of the cache starts
// over. The conversation must fit the context. `h2o` (eviction/h2o_policy.h) builds on it.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "memory/policy/memory_policy.h"

namespace kvmem::memory {

class FullPolicy : public MemoryPolicy {
 public:
  // pool: at least n_ctx rows, outliving the policy. rows (may be null: empty) with the tokens
  // and text it was computed from.
  FullPolicy(const PolicyEnv& env, kv::KvPool* pool, std::unique_ptr<kv::KvSequence> rows = {},
             std::vector<int32_t> tokens = {}, std::string text = {});

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  bool CanStep() const override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  PersistedMemory Persist() const override;
  Json Report() const override { return report_; }
  std::string_view text() const override { return text_; }
  std::span<const int32_t> context_tokens() const override { return tokens_; }
  int64_t n_rows() const override { return seq_->n_rows(); }
  size_t bytes_in_use() const override { return pool_->bytes_in_use(); }

 protected:
  // The plan's rows before its prefill: the kept prefix (a new sequence when none is kept),
  // where the turn begins.
  void KeepPrefix(const TurnPlan& plan);
  // Prefills `ids` after the sequence's rows (micro-batched, through the batcher), their
  // tokens and pieces appended as each micro-batch lands; logits of the last. With a tap, the
  // passes run under compute->Exclusive() with the tap in every layer (logits may then be null).
  // On error the sequence is cut back to the tokens that landed.
  Status Prefill(std::span<const int32_t> ids, std::vector<float>* logits,
                 const engine::LayerTap* tap = nullptr);
  // The report every cache policy starts from.
  Json BaseReport(const TurnPlan& plan) const;

  const PolicyEnv& env_;
  kv::KvPool* pool_;
  // Where the open turn's rows and text begin (Abort cuts back to them); -1: no turn.
  int64_t turn_rows_ = -1;
  size_t turn_text_ = 0;
  std::unique_ptr<kv::KvSequence> seq_;
  std::vector<int32_t> tokens_;  // ids of seq_'s rows, in order
  std::string text_;             // what those tokens spell (the rendered conversation so far)
  Json report_;
};

}  // namespace kvmem::memory
