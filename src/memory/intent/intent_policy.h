// The `intentkv` memory policy (intentkv.txt, Phase 1): the `full` cache (prefix matching over
// the conversation), pruned to a budget of C live history rows once per turn, after the prompt
// but its last token is prefilled (so the whole reply reads the kept set):
//
//   kept = forced ∪ top_{C - |forced|}(candidates by score)          (Eq. 1)
//   forced = the protected system span ∪ the actionable span (the latest user/tool message and
//            the generation prompt; the request's focus when it names one)  (turn_spans.h)
//
// The score is the config's `scorer`:
//   intentkv   the rule score (Eq. 3) against the session's QueryMemory (Eq. 2, query_memory.h)
//   query      the same against the current turn's query only (the paper's "- memory" ablation)
//   streaming  StreamingLLM: 4 attention sinks and the most recent rows
//   snapkv     SnapKV: attention from the last W = 32 prompt tokens, summed over layers and heads,
//              max-pooled with kernel 7; the window is kept
//   h2o        H2O: attention accumulated over every prompt token so far, half the budget to the
//              most recent rows (ratio mode with a recent floor)
// and the `layout` how dropped rows go:
//   dead_slot  slot-map redirection (§3.4): dead slots, kept rows unmoved, the token stream
//              intact, so the next turn's prompt matches the whole cached prefix; whole blocks
//              of dead rows give their storage back at Commit (slot_map_eviction.h (a)-(c))
//   compact    the classic layout: kept rows copied to positions 0.. and re-rotated; the cache
//              then spells only the kept tokens, so the next prompt matches up to the first drop
//
// Eq. 2 is updated at each pruning event (appendix H: a turn within the budget neither scores
// nor updates the memory). The agent is the explicit session id; inside an agent, sessions are
// told apart by the first user message's tokens, else the first 256 tokens (appendix A).
// Abort puts everything back (rows, lists, memory). The state (dead rows, query memories,
// H2O's accumulated scores) persists with the cache.
// Thread-safety: as MemoryPolicy.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/forward.h"
#include "memory/full/full_policy.h"
#include "memory/intent/query_memory.h"
#include "memory/intent/turn_spans.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {

PolicyKind IntentKvPolicyKind();

struct IntentKvConfig {
  enum class Scorer { kIntentKv, kQuery, kStreaming, kSnapKv, kH2o };
  int64_t budget = 2048;  // C: live history rows
  double lambda = 0.5;    // Eq. 2's decay rate
  bool protect_system = true;
  Scorer scorer = Scorer::kIntentKv;
  bool compact = false;  // layout
};

class IntentKvPolicy : public FullPolicy {
 public:
  static Result<std::unique_ptr<IntentKvPolicy>> Make(const PolicyEnv& env, const Json& config,
                                                      kv::KvPool* pool, StoredMemory stored);

  Result<TurnPlan> Plan(const TurnInput& input) const override;
  Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) override;
  Status Step(int32_t token, std::vector<float>* logits) override;
  Status Commit() override;
  void Abort() override;
  // {"live_prompt_bytes": [begin, end, ...]}: the byte ranges of the turn's prompt whose rows the
  // reply reads.
  Json Detail() const override { return detail_; }
  // Cached: the live rows' text; parts: each run of dropped rows, {"kind": "dropped", "tokens",
  // "bytes"}.
  Json Inspect() const override;
  std::optional<std::string_view> client_conversation() const override { return conversation_; }
  PersistedMemory Persist() const override;

 private:
  IntentKvPolicy(const PolicyEnv& env, kv::KvPool* pool, IntentKvConfig config,
                 StoredMemory stored);
  Status RestoreState(const Json& state);
  // Ranks the candidates and returns the kept ones (ascending storage indices).
  std::vector<int64_t> Rank(std::span<const int64_t> candidates, int64_t n_keep,
                            const TurnSpans& spans);
  Json StateJson() const;

  IntentKvConfig config_;
  QueryMemory memory_;
  std::vector<uint8_t> live_;  // (tokens_) 1 for a row the lists read
  std::vector<double> heavy_;  // (tokens_) h2o: accumulated attention, all layers and heads
  // The open turn's: what Abort puts back.
  std::optional<kv::KvView> saved_view_;
  std::vector<uint8_t> saved_live_;
  std::vector<double> saved_heavy_;
  std::unique_ptr<kv::KvSequence> saved_seq_;  // compact: the rows before compaction
  std::vector<int32_t> saved_tokens_;
  std::string saved_text_;
  uint64_t session_ = 0;
  std::optional<std::vector<float>> saved_memory_;  // the session's before the turn ({}: none)
  // The open turn's query: sum of the actionable span's post-RoPE Q rows (layers, heads, dim).
  std::vector<double> enc_sum_;
  int64_t enc_rows_ = 0;
  std::vector<double> window_;  // snapkv: (tokens_) this turn's window attention
  // The conversation as the client knows it (prompt and reply): text_ unless compaction dropped
  // rows; what a new prompt adds is matched against it.
  std::string conversation_;
  std::optional<std::string> saved_conversation_;
  Json detail_;
  Json state_;
  int64_t protect_rows_ = 0;
};

}  // namespace kvmem::memory
