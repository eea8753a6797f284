// The `memart` memory policy (alias `retrieval`): the agent's rows are a MemArt history
// (memart.h). A turn prefills only what its prompt adds to the conversation (the new message
// when the client sends just that; the suffix when it resends everything), reading in each
// layer the history blocks its attention retrieves, re-placed before it; the turn (prompt and
// reply) then joins the history, so the history may outgrow the context (up to
// PolicyEnv::max_history_tokens). The history's turns are its chat messages.
//
// Config: memart_presets.h's fields. `preset` picks the base the other fields override: "auto"
// (the model's preset when one ships or was calibrated, else the paper's per-layer retrieval,
// which the report and the log then say), "model" or "paper". The focus span (a request's
// retrieval_query) names the tokens that score the blocks.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/policy/memory_policy.h"
#include "memory/policy/policy_table.h"
#include "memory/retrieval/memart.h"

namespace kvmem::memory {

// The table row.
PolicyKind MemArtPolicyKind();

// A parsed config (every field present: the table's parse gave it) as the MemArtConfig it runs.
Result<MemArtConfig> MemArtConfigOf(const Json& config);

class MemArtPolicy : public MemoryPolicy {
 public:
  // history: the rows (empty: none) with their tokens and text.
  static Result<std::unique_ptr<MemArtPolicy>> Make(const PolicyEnv& env, const Json& config,
                                                    kv::KvPool* pool, StoredMemory stored);

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  bool CanStep() const override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  PersistedMemory Persist() const override;
  Json Report() const override { return report_; }
  // {"rows_read": [[begin, end, ...] per layer]}: the history rows each layer read;
  // "ranks": [{"block", "ranks": [rank per layer], "layers": [the layers that read it]}] for
  // each block read in any layer (RetrievalReport::ranks: 1 the best, 0 always kept or not
  // scored).
  Json Detail() const override;
  // Parts: the history's memory blocks, {"kind": "block", "block", "tokens", "bytes"}.
  Json Inspect() const override;
  std::string_view text() const override { return text_; }
  std::optional<std::string_view> client_conversation() const override { return std::nullopt; }
  std::span<const int32_t> context_tokens() const override { return context_; }
  int64_t n_rows() const override { return memart_->history_rows(); }
  size_t bytes_in_use() const override { return pool_->bytes_in_use(); }

 private:
  MemArtPolicy(const PolicyEnv& env, kv::KvPool* pool, Json config)
      : env_(env), pool_(pool), config_(std::move(config)) {}
  // Rows first + i (below limit) where tokens[i] opens a chat message.
  std::vector<int64_t> MessageStarts(std::span<const int32_t> tokens, int64_t limit) const;
  // The focus's tokens among the turn's `ids` (the encoded `query_text`, maybe after a BOS),
  // before the last; InvalidArgument when it is not in the text.
  Result<tokenizer::TokenSpan> FocusTokens(std::string_view query_text, std::span<const int32_t> ids,
                                 std::string_view focus) const;
  // The last turn's account: what was read and computed.
  Json TurnReport(const RetrievalReport& rep, const TurnPlan& plan) const;

  const PolicyEnv& env_;
  kv::KvPool* pool_;
  Json config_;
  std::unique_ptr<MemArtMemory> memart_;
  std::vector<int32_t> tokens_;    // the history's ids
  std::string text_;               // what they spell
  std::vector<size_t> token_ends_;  // (tokens_) where each token's text ends
  // The open turn: its tokens, text and text ends as they join the history; the sampler's
  // context (history then turn).
  std::vector<int32_t> turn_tokens_;
  std::string turn_text_;
  std::vector<size_t> turn_ends_;
  std::vector<int32_t> context_;
  Json report_;
  std::vector<std::vector<RowSpan>> rows_read_;  // (n_layers) of the last turn
  Json block_ranks_ = Json::array();             // Detail()'s "ranks" of the last turn
};

}  // namespace kvmem::memory
