// Agents whose memory is their KV cache (semantic.md, issue "agents that remember"): each agent
// (tenant + id) owns a KV sequence in its own pool, kept in RAM while it is hot and persisted
// to the AgentStore after every turn, so it survives restarts and is reloaded (warm) instead of
// re-prefilled. A turn gets the rendered prompt text; the agent's cached text is matched against
// it at character level (EXACT / EXTEND / DIVERGE, memory/store/prefix_match.h), the matching
// stored tokens are kept (their ids, generated ones included, are never re-tokenized) and only
// the rest of the prompt is prefilled.
//
// An agent's memory mode (memory_mode.h) is full unless CreateAgent chose retrieval: its rows
// are then a MemArt history, each turn prefills only what its prompt adds and reads the history
// blocks its attention retrieves; TurnResult::retrieval and AgentStatus::last_turn report them.
//
// Tiers: hot (resident in RAM, under a byte budget kept by evicting the least recently used idle
// agents) and warm (only in the store). An agent evicted from RAM loses nothing.
//
// Thread-safety: every method may be called from many threads. Turns of one agent run one at a
// time in arrival order (a ticket queue); turns of different agents run in parallel, their
// forward passes interleaved one micro-batch or decode step at a time over the shared
// ThreadPool (the model's weights are read by every agent; pools are per agent, so no agent
// ever reads another's rows).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kv/kv_format.h"
#include "kv/layer_chunks.h"
#include "memory/agents/memory_mode.h"
#include "memory/store/agent_id.h"
#include "memory/store/agent_store.h"
#include "memory/store/prefix_match.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::memory {

struct AgentRuntimeOptions {
  // q8_0 by default: the measured loss table (README "KV formats") puts its KL to f16 at
  // 3.8e-3 (+0.01% perplexity) for half the bytes; q4_0 keys cost +12% perplexity.
  kv::KvFormats formats{kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0};
  int block_rows = 256;
  int64_t n_ctx = 0;                        // per agent; 0: the model's training context
  size_t hot_budget_bytes = size_t{2} << 30;  // KV bytes resident across agents
  int max_batch = 256;                      // prefill micro-batch
  double min_diverge_ratio = 0.8;           // semantic.md §3.3
  // KV memory written once at start-up (Warmup) so the first agents' rows, loaded or computed,
  // land in touched pages; bounded by hot_budget_bytes.
  size_t prefault_bytes = size_t{256} << 20;
  // Retrieval agents: history tokens kept at most (a turn is refused with ResourceExhausted
  // when the history plus one context would pass it). 128K tokens of SmolLM2 at q8_0: 1.5 GiB.
  int64_t max_history_tokens = int64_t{1} << 17;
};

enum class Tier { kMiss, kHot, kWarm };
const char* TierName(Tier t);  // "miss", "hot", "warm"

struct TurnParams {
  int max_tokens = 256;  // generated-token budget (also bounded by the context)
  engine::SamplerConfig sampler;
  std::vector<std::string> stop;
  // Retrieval agents: text of the turn's new part (e.g. the question inside an instruction)
  // whose tokens alone score the memory's blocks (MemArtMemory::BeginTurn's `scoring`); empty:
  // all of the new part's. Ignored by full-memory agents.
  std::string retrieval_query;
};

struct PromptStats {
  int64_t prompt_tokens = 0;  // kept + prefilled
  int64_t cached_tokens = 0;  // kept from the agent's cache
  Tier tier = Tier::kMiss;
  store::PrefixMatchKind match = store::PrefixMatchKind::kExact;
  double load_seconds = 0;     // reading a warm cache from the store
  double prefill_seconds = 0;
};

struct TurnCallbacks {
  std::function<void(const PromptStats&)> on_prompt;  // once, after the prefill
  std::function<bool(std::string_view)> on_text;      // false: stop (client gone)
};

// A history block a retrieval turn read: history tokens [first_token, first_token + n_tokens),
// the conversation text they spell, and in how many layers it was among the retrieved. The
// tokens are the block's that were read: all of them unless whole turns were (a block read in
// two pieces is listed twice).
struct RecalledBlock {
  int64_t block = 0;
  int64_t first_token = 0;
  int64_t n_tokens = 0;
  int layers = 0;
  std::string text;
};

// What a retrieval turn read and computed.
struct RetrievalTurn {
  int64_t history_tokens = 0;   // in the memory when the turn began
  int64_t retrieved_rows = 0;   // R: history rows placed before the query, per layer
  int64_t prefill_tokens = 0;   // the query: what the prompt added to the conversation
  int64_t kv_len_decode = 0;    // rows the first generated token reads (R + query)
  std::vector<RecalledBlock> blocks;  // chronological
  // The query tokens [scoring_begin, scoring_end) whose rows scored the blocks (all but the
  // last unless TurnParams::retrieval_query named some).
  int64_t scoring_begin = 0, scoring_end = 0;
};

enum class TurnEnd { kEndOfTurn, kStopSequence, kLength, kCancelled };

struct TurnResult {
  PromptStats prompt;
  int64_t completion_tokens = 0;
  TurnEnd end = TurnEnd::kEndOfTurn;
  std::string stop_sequence;
  double decode_seconds = 0;
  double save_seconds = 0;
  int64_t kv_tokens = 0;  // rows the agent's cache (retrieval: its history) holds after the turn
  std::optional<RetrievalTurn> retrieval;  // retrieval agents
};

struct AgentStatus {
  store::AgentKey key;
  int64_t tokens = 0;
  int64_t bytes = 0;  // hot: KV bytes in RAM; warm: bytes on disk
  Tier tier = Tier::kWarm;
  kv::KvFormats formats;
  int64_t last_use_unix_ms = 0;
  MemoryMode mode = MemoryMode::kFull;
  std::optional<RetrievalTurn> last_turn;  // retrieval agents, since they were last loaded
};

struct RuntimeStats {
  int64_t hot_bytes = 0;
  int64_t agents_hot = 0;
  int64_t agents_stored = 0;
  int64_t store_bytes = 0;
  int64_t waiting_turns = 0;
};

class AgentRuntime {
 public:
  // model, tok and threads must outlive the runtime; store may be null (nothing persists).
  AgentRuntime(const model::Model& model, const tokenizer::Tokenizer& tok, ThreadPool* threads,
               store::AgentStore* store, AgentRuntimeOptions options);
  ~AgentRuntime();

  // Runs one token through the model so its weights are paged in, and pre-faults
  // prefault_bytes of KV memory, before the first request: a warm agent's first turn then costs
  // its cache load, not page faults.
  Status Warmup();

  // One turn of `key`'s conversation (nullptr: an anonymous turn that reads and keeps nothing):
  // prompt_text is the whole rendered prompt (chat template applied, no BOS text). The reply
  // streams through callbacks.on_text; the agent's cache is saved before this returns, so a
  // returned turn is durable. InvalidArgument for a bad key, OutOfRange when the prompt does
  // not fit the context, IoError when the save failed (the previous turn's cache then stays).
  Result<TurnResult> RunTurn(const store::AgentKey* key, std::string_view prompt_text,
                             const TurnParams& params, const TurnCallbacks& callbacks);

  // Creates an agent with the given memory before its first turn (an agent a turn names without
  // one is created full). FailedPrecondition when the agent exists; InvalidArgument for a bad
  // key or memory; the store's error when it cannot be persisted.
  Status CreateAgent(const store::AgentKey& key, const AgentMemory& memory);

  // The rendered conversation the agent's cache holds ("" for a new agent), so a client that
  // keeps no history (kvmem chat) can extend it. Brings a stored agent into RAM.
  Result<std::string> ConversationText(const store::AgentKey& key);

  // Agents of a tenant (hot ones and stored ones), sorted by id.
  Result<std::vector<AgentStatus>> List(const std::string& tenant);
  Result<AgentStatus> Get(const store::AgentKey& key);
  // Waits for the agent's running turn, then forgets it in RAM and in the store.
  Status Delete(const store::AgentKey& key);

  RuntimeStats stats();
  int64_t n_ctx() const { return n_ctx_; }
  const AgentRuntimeOptions& options() const { return options_; }

 private:
  struct Slot;
  class Turn;
  std::shared_ptr<Slot> GetSlot(const store::AgentKey& key);
  // Brings the agent's cache into the slot (hot, else warm from the store, else empty).
  // Errors only for a retrieval agent whose stored memory cannot be used (kept on disk).
  Result<Tier> Acquire(const store::AgentKey* key, Slot& slot, double* load_seconds);
  // Retrieval agents: turns slot.seq (the history, empty or loaded) into slot.memart.
  Status AdoptHistory(Slot& slot);
  // Rows first + i (below limit) where tokens[i] opens a chat message.
  std::vector<int64_t> MessageStarts(std::span<const int32_t> tokens, int64_t first,
                                     int64_t limit) const;
  // The tokens of `retrieval_query` among a retrieval turn's `ids` (the encoded `query_text`,
  // maybe after a BOS), before the last; InvalidArgument when it is not in the text.
  Result<TokenRange> ScoringTokens(std::string_view query_text, std::span<const int32_t> ids,
                                   std::string_view retrieval_query) const;
  // Keeps the stored tokens the new prompt can reuse; returns the ids to prefill.
  Result<std::vector<int32_t>> PlanPrompt(Slot& slot, std::string_view text, PromptStats* ps);
  Status Prefill(Slot& slot, std::span<const int32_t> ids, std::vector<float>* logits);
  // A turn of a retrieval agent (agent_retrieval_turn.cpp).
  Result<TurnResult> RunRetrievalTurn(Slot& slot, std::string_view prompt_text, const TurnParams& params,
                                      const TurnCallbacks& callbacks, TurnResult r);
  // Samples the reply from `logits` on, feeding each token to seq at next_position(); kept(id)
  // after each token is in seq. Fills r's end, stop_sequence, completion_tokens.
  Status DecodeReply(kv::KvSequence* seq, const std::function<int64_t()>& next_position,
                     std::vector<float>* logits, std::vector<int32_t> history,
                     const TurnParams& params, const TurnCallbacks& callbacks, TurnResult* r,
                     const std::function<void(int32_t)>& kept);
  Status SaveSlot(const store::AgentKey& key, const Slot& slot, double* seconds);
  void EnforceBudget(const Slot* keep);
  std::string_view Piece(int32_t id) const;

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  ThreadPool* threads_;
  store::AgentStore* store_;
  AgentRuntimeOptions options_;
  int64_t n_ctx_;
  std::unique_ptr<kv::LayerChunks> chunks_;  // layer memory shared by the agents' pools
  std::mutex compute_mu_;  // one forward pass at a time over threads_
  std::mutex registry_mu_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;  // by tenant '/' id
};

}  // namespace kvmem::memory
