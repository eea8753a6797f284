// The memory-policy seam (DESIGN.md "The memory-policy seam"; after llama.cpp's llama-memory.h:
// plan, then commit). Every way an agent remembers is a MemoryPolicy: one object per agent that
// owns the agent's KV rows (in a pool the runtime gives it), the token ids and text they came
// from, and whatever else the policy keeps. AgentRuntime (memory/agents/) drives a turn through
// it without knowing which policy it is:
//
//   KVMEM_ASSIGN_OR_RETURN(TurnPlan plan, policy.Plan({prompt_text, focus}));   // decides only
//   KVMEM_ASSIGN_OR_RETURN(PromptAccount a, policy.Apply(plan, &logits));       // the prefill
//   while (sampling) policy.Step(token, &logits);   // each generated token the reply keeps
//   policy.Commit();  (or policy.Abort() on an error)                         // the turn ends
//   store.Save(..., policy.Persist());  policy.Report() -> last_turn (JSON)
//
// What each call may touch:
//   Plan     reads the policy's state and the prompt; mutates nothing. Errors (a prompt too long,
//            a focus the new text does not hold) leave the policy exactly as it was.
//   Apply    runs the plan's prefill through the engine (the compute lock of PolicyEnv held
//            around each forward pass) and leaves the turn open. On error the caller aborts it.
//   Step     feeds one generated token (decode), only while the turn is open and CanStep().
//   Commit   ends the turn with the prompt and the reply as part of the memory.
//   Abort    ends the turn with the memory as it was before it (a cache whose prompt diverged
//            keeps only the prefix the plan kept; AgentRuntime then reloads the stored one).
//   Persist  a view of what the store saves, valid until the next non-const call.
//   Report   the last turn's account, JSON (before the first turn since creation or restore:
//            null, or the policy's standing notes).
//   Rebuild  between turns, when a client asks: re-organizes the memory from its history (EpiCache
//            clusters its episodes anew and rebuilds each); a policy with nothing to rebuild
//            answers null. Returns what it did and cost.
//   Segments between turns, for memories made of named segments a client writes (segments.h):
//            list, put or delete one. A write that fails leaves the memory as it was; one that
//            succeeds is the memory's new state (the runtime then saves it). Other policies
//            answer Unsupported.
// Policies are created and restored through the table (policy_table.h), never by name here.
// Thread-safety: not thread-safe; the runtime runs one turn of an agent at a time (its ticket),
// and different agents' policies share only the model, the tokenizer and the compute lock.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/step_batcher.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "memory/embed/sentence_encoder.h"
#include "memory/policy/segments.h"
#include "memory/store/prefix_match.h"
#include "model/model.h"
#include "tokenizer/token_span.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::memory {

using Json = nlohmann::json;

// What every policy computes with; owned by the runtime, outliving every policy.
struct PolicyEnv {
  const model::Model* model = nullptr;
  const tokenizer::Tokenizer* tok = nullptr;
  ThreadPool* threads = nullptr;
  // Forward passes over `threads`: Forward() for a plain pass (shared with other agents' in
  // one batched step), Exclusive() for one that needs the model to itself (taps, custom
  // visibility, embeddings).
  engine::StepBatcher* compute = nullptr;
  int64_t n_ctx = 0;                 // per agent: what one forward's rows may span
  int max_batch = 256;               // prefill micro-batch
  double min_diverge_ratio = 0.8;    // semantic.md §3.3: below it a diverged cache starts over
  // Policies whose memory may outgrow the context (history kept apart from what a turn reads):
  // rows they keep at most.
  int64_t max_history_tokens = int64_t{1} << 17;
  std::string model_fingerprint;  // store::ModelFingerprint of the GGUF; "" when unknown
  std::string presets_dir;        // where `kvmem calibrate` writes presets; "" = none
  // The sentence encoder policies that cluster or route text use (EpiCache's episodes); null
  // when the server has none. Embedding runs on `threads` under compute->Exclusive().
  const embed::SentenceEncoder* encoder = nullptr;

  // The text a token spells in a rendered prompt ("" for a BOS the tokenizer adds itself).
  std::string_view Piece(int32_t id) const;
};

// One turn's input.
struct TurnInput {
  std::string_view prompt_text;  // the whole rendered prompt (chat template applied, no BOS)
  // The request's focus span (`retrieval_query`): words in what the prompt adds whose tokens
  // alone score memory (a MemArt query, an EpiCache route, an IntentKV actionable span).
  // Empty: the policy's default (all the new tokens but the last).
  std::string_view focus;
};

// What Plan decided. Fields every policy fills; a policy keeps its own decisions (which blocks
// to read, which rows to evict) for Apply in `detail`.
struct TurnPlan {
  store::PrefixMatchKind match = store::PrefixMatchKind::kExact;
  int64_t kept_rows = 0;         // stored rows reused as they are (the cached prefix)
  size_t kept_text_bytes = 0;    // bytes of the prompt the kept rows spell
  std::vector<int32_t> prefill;  // tokens computed this turn; the last is decoded from
  tokenizer::TokenSpan focus;    // prefill tokens that score memory
  std::string_view prompt_text;  // the input's (valid for the turn)
  Json detail = Json::object();  // the policy's own (not interpreted by the runtime)
};

// What the prompt cost, known after Apply.
struct PromptAccount {
  int64_t prompt_tokens = 0;  // rows the first generated token reads (prompt as the model saw it)
  int64_t cached_tokens = 0;  // of them, rows not computed this turn
};

// What the store keeps of an agent. The views point into the policy.
struct PersistedMemory {
  const kv::KvSequence* rows = nullptr;  // every stored row, storage order
  // (rows->n_rows()) their ids; rows that hold no single token (EpiCache's compressed slots,
  // whose layers and KV heads each hold a different one) carry 0.
  std::span<const int32_t> tokens;
  std::string_view text;               // the text the tokens spell
  std::span<const size_t> token_ends;  // empty, or (tokens) where each token's text ends
  Json state = Json::object();         // the policy's own state
};

// Ascending row indices as the flat [begin, end, begin, end, ...] list of their runs: how
// Detail() reports the rows a list read.
Json RowRangesJson(std::span<const int64_t> ascending);
// The bytes of text that tokens [begin, end) spell, as [begin byte, end byte]; token_ends:
// where each token's text ends (PersistedMemory::token_ends). Requires begin < end <= size.
Json TokenBytesJson(std::span<const size_t> token_ends, int64_t begin, int64_t end);

class MemoryPolicy {
 public:
  virtual ~MemoryPolicy() = default;

  virtual Result<TurnPlan> Plan(const TurnInput& input) const = 0;
  // logits: (n_vocab) of the plan's last prefill token.
  virtual Result<PromptAccount> Apply(const TurnPlan& plan, std::vector<float>* logits) = 0;
  // Whether one more token fits (the rows it would read stay within the context).
  virtual bool CanStep() const = 0;
  virtual Status Step(int32_t token, std::vector<float>* logits) = 0;
  virtual Status Commit() = 0;
  virtual void Abort() = 0;

  virtual Result<Json> Rebuild() { return Json(nullptr); }
  // kList: [segment...] in memory order; kPut: the segment as stored; kDelete: {"deleted": true,
  // "name"} (NotFound when there is none). A segment: {"name", "text", "group", "static",
  // "tokens"}.
  virtual Result<Json> Segments(const SegmentRequest& request);

  virtual PersistedMemory Persist() const = 0;
  virtual Json Report() const = 0;
  // What the last turn read, in full (rows per layer or per KV head), for the evaluation's
  // evidence recall and the inspector's recent turns; too large for the API's last_turn. Null
  // when the policy reads every row.
  virtual Json Detail() const { return nullptr; }
  // The memory as it is between turns, for the inspector (GET /v1/agents/{id}/memory):
  //   "cached": the byte ranges of text() whose tokens have rows a next turn can read, flat
  //             [begin, end, ...]
  //   "parts":  the policy's own units of memory, in order, each {"kind", "bytes": [begin, end],
  //             ...its fields}
  //   "note":   optional, what a reader of "cached" should know about this memory
  //   "text":   optional, the memory as text when it is not a conversation (text() is then
  //             ""): what "cached" and the parts' bytes refer to
  // The default: the whole text cached, no parts.
  virtual Json Inspect() const;

  // The conversation the memory holds as text ("" when empty): a client that keeps no history
  // extends it.
  virtual std::string_view text() const = 0;
  // The conversation as the client sent it and got it back, which a request that does not start
  // with it diverges from (AgentRuntime's on_diverge): text(), unless the policy rewrote that
  // (a compaction); nullopt for memories that take a prompt not continuing their history as
  // new: nothing ever diverges there.
  virtual std::optional<std::string_view> client_conversation() const { return text(); }
  // The tokens the sampler's repetition penalty looks back over during the open turn.
  virtual std::span<const int32_t> context_tokens() const = 0;
  // Rows the memory holds (what /v1/agents reports as cached tokens) and their bytes in RAM.
  virtual int64_t n_rows() const = 0;
  virtual size_t bytes_in_use() const = 0;
};

}  // namespace kvmem::memory
