// Agents whose memory is their KV cache (semantic.md, issue "agents that remember"): each agent
// (tenant + id) owns a memory policy (memory/policy/memory_policy.h) over its own pool, kept in
// RAM while it is hot and persisted to the AgentStore after every turn, so it survives restarts
// and is reloaded (warm) instead of re-prefilled. A turn gets the rendered prompt text and runs
// it through the policy (plan, apply, decode, commit); which rows are kept, retrieved or evicted
// is the policy's business, never the runtime's. An agent's policy is chosen when it is created
// (CreateAgent; else the runtime's default, SetDefaultMemory) and kept in its manifest.
//
// Tiers: hot (resident in RAM, under a byte budget kept by evicting the least recently used idle
// agents) and warm (only in the store). An agent evicted from RAM loses nothing.
//
// A store shared by several servers (agent_store.h): every operation on an agent holds its
// lease, so one server at a time works on it, and a memory resident here that another server
// has written since is dropped and loaded again (the store's Version). While the store cannot be
// reached, a turn of an agent this server knows to carry its whole conversation in the prompt
// is answered from the prompt alone (recomputed, not saved, with a log line); any other (a
// server-side conversation, or an agent whose policy is unknown here) fails with Unavailable.
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
#include "engine/step_batcher.h"
#include "kv/kv_format.h"
#include "kv/layer_chunks.h"
#include "memory/agents/inspection.h"
#include "memory/agents/tier.h"
#include "memory/agents/turn.h"
#include "memory/policy/policy_table.h"
#include "memory/prefix/prefix_cache.h"
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
  int max_batch = 256;                      // prefill micro-batch (the longest prompt chunk)
  // How concurrent turns share forward passes (engine/step_batcher.h); its max_step_tokens is
  // max_batch.
  engine::StepBatcher::Options batching;
  double min_diverge_ratio = 0.8;           // semantic.md §3.3
  // KV memory written once at start-up (Warmup) so the first agents' rows, loaded or computed,
  // land in touched pages; bounded by hot_budget_bytes.
  size_t prefault_bytes = size_t{256} << 20;
  // Policies whose history may outgrow the context: tokens kept at most (a turn is refused with
  // ResourceExhausted when the history plus one context would pass it). 128K tokens of SmolLM2
  // at q8_0: 1.5 GiB.
  int64_t max_history_tokens = int64_t{1} << 17;
  std::string model_fingerprint;  // for per-model presets (PolicyEnv)
  std::string presets_dir;
  // The sentence encoder policies cluster and route text with (PolicyEnv::encoder); may be
  // null. Outlives the runtime.
  const embed::SentenceEncoder* encoder = nullptr;
  // The radix prefix cache of turns that name no agent (memory/prefix/prefix_cache.h): KV bytes
  // of cached prefixes it keeps, per tenant-keyed tree, LRU; 0: none (such turns prefill their
  // whole prompt, the `none` policy).
  size_t prefix_cache_bytes = size_t{256} << 20;
  // Room in the cache's pool beside the cached prefixes for this many anonymous turns of a whole
  // context in flight (twice kvmem serve's default --max-running; only the block table is sized
  // up front, memory is taken as rows are written).
  int prefix_cache_room_turns = 32;
};

struct AgentStatus {
  store::AgentKey key;
  int64_t tokens = 0;
  int64_t bytes = 0;  // hot: KV bytes in RAM; warm: bytes on disk
  Tier tier = Tier::kWarm;
  kv::KvFormats formats;
  int64_t last_use_unix_ms = 0;
  std::string policy = "full";
  Json config = Json::object();  // the policy's, as parsed (empty when not known: unreadable)
  Json last_turn;                // the policy's Report() since the agent was last loaded; null
  bool server_conversation = false;
  int max_checkpoints = store::kDefaultMaxCheckpoints;
  std::vector<store::CheckpointInfo> checkpoints = {};  // Get only (texts left out), oldest first
};

struct RuntimeStats {
  int64_t hot_bytes = 0;
  int64_t agents_hot = 0;
  int64_t agents_stored = 0;
  int64_t store_bytes = 0;
  int64_t waiting_turns = 0;
  engine::StepStats steps;  // the batched forward steps so far
  prefix::PrefixCacheStats prefix_cache;  // zeros without a prefix cache
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

  // One turn of `key`'s conversation (nullptr: an anonymous turn, which keeps nothing of its own
  // but reads and feeds the prefix cache of params.tenant when the runtime has one):
  // prompt_text is the whole rendered prompt (chat template applied, no BOS text). The reply
  // streams through callbacks.on_text (or on_delta); the agent's cache is saved before this
  // returns, so a returned turn is durable. InvalidArgument for a bad key, or for n > 1 or
  // prompt_logprobs with a key (memory/agents/turn.h), OutOfRange when the prompt does not fit
  // the context, IoError when the save failed (the previous turn's cache then stays). A turn
  // whose callback stopped it (TurnEnd::kCancelled) is aborted, not committed: the agent keeps
  // neither its prompt nor its partial reply (MemoryPolicy::Abort). A prompt that diverges from
  // the agent's conversation does what params.on_diverge says (divergence.h; FailedPrecondition
  // for kReject) and continues from a checkpoint that shares more of it; an agent with a
  // server-side conversation composes its prompt with params.continue_conversation.
  Result<TurnResult> RunTurn(const store::AgentKey* key, std::string_view prompt_text,
                             const TurnParams& params, const TurnCallbacks& callbacks);

  // A policy name and config as this runtime would run them: InvalidArgument listing the valid
  // policies, or naming the bad field.
  Result<MemorySpec> ValidateMemory(std::string_view policy, const Json& config) const;
  // The memory of agents a turn creates without CreateAgent ("full" until set). Call before the
  // first turn.
  Status SetDefaultMemory(std::string_view policy, const Json& config);
  const MemorySpec& default_memory() const { return default_memory_; }
  // GET /v1/policies for this runtime's model.
  nlohmann::ordered_json DescribePolicies() const { return memory::DescribePolicies(env_); }

  // Creates an agent with the given memory before its first turn (an agent a turn names without
  // one gets default_memory()). FailedPrecondition when the agent exists; InvalidArgument
  // for a bad key; the store's error when it cannot be persisted.
  Status CreateAgent(const store::AgentKey& key, const MemorySpec& memory);

  // The rendered conversation the agent's cache holds ("" for a new agent), so a client that
  // keeps no history (kvmem chat) can extend it. Brings a stored agent into RAM.
  Result<std::string> ConversationText(const store::AgentKey& key);

  // Agents of a tenant (hot ones and stored ones), sorted by id.
  Result<std::vector<AgentStatus>> List(const std::string& tenant);
  Result<AgentStatus> Get(const store::AgentKey& key);
  // Waits for the agent's running turn, then forgets it in RAM and in the store.
  Status Delete(const store::AgentKey& key);
  // Asks the agent's memory policy to re-organize from its history (MemoryPolicy::Rebuild),
  // after the turns already queued, and saves it. What the policy did (null: nothing to
  // rebuild). NotFound for an agent with no memory.
  Result<Json> Rebuild(const store::AgentKey& key);
  // A segment operation on the agent's memory (MemoryPolicy::Segments), after the turns already
  // queued. A write is saved before this returns; a write that fails (the policy's error or the
  // save's) leaves the agent's memory as it was, in RAM and in the store. NotFound for an agent
  // with no memory; Unsupported for one whose policy has no segments (naming those that do).
  Result<Json> Segments(const store::AgentKey& key, const SegmentRequest& request);

  // The agent's memory for the inspector, after the turns already queued; brings a stored
  // agent into RAM. NotFound for an agent with no memory.
  Result<AgentMemoryView> Inspect(const store::AgentKey& key);
  // The agent's last turns (at most kRecentTurns, oldest first) since this runtime started;
  // NotFound for an agent with no memory.
  Result<std::vector<TurnRecord>> RecentTurns(const store::AgentKey& key);

  RuntimeStats stats();
  int64_t n_ctx() const { return n_ctx_; }
  store::AgentStore* store() const { return store_; }  // null: nothing persists
  const AgentRuntimeOptions& options() const { return options_; }

 private:
  struct Slot;
  class Turn;
  class DivergedTurn;
  std::shared_ptr<Slot> GetSlot(const store::AgentKey& key);
  // Brings the agent's memory into the slot (hot, else warm from the store, else new).
  // extra_rows: pool room beyond what the policy needs (the forks of n > 1 choices).
  Result<Tier> Acquire(const store::AgentKey* key, Slot& slot, double* load_seconds,
                       int64_t extra_rows = 0);
  // Acquire for an operation on an agent that must exist (inspect, rebuild): NotFound when it
  // has no memory in RAM or in the store.
  Result<Tier> AcquireExisting(const store::AgentKey& key, Slot& slot);
  // A new memory with the slot's spec in a new pool.
  Status CreateMemory(Slot& slot, int64_t extra_rows);
  // The stored memory of `key` (or its checkpoint) into the slot; NotFound when there is none.
  // The slot is unchanged on error.
  Status LoadMemory(const store::AgentKey& key, Slot& slot, const MemorySpec& spec,
                    std::string_view checkpoint = {});
  // Before a turn of `key` whose memory is in the slot: when `prompt` diverges from the
  // conversation the agent holds, carries out on_diverge (keep it as a checkpoint, or refuse the
  // turn with FailedPrecondition), and continues instead from a checkpoint that shares more of
  // the prompt (loading it into the slot). *retire: a checkpoint the prompt continues whole,
  // to delete once the turn is saved (the new conversation holds it).
  Result<Divergence> Reconcile(const store::AgentKey& key, Slot& slot, std::string_view prompt,
                               OnDiverge on_diverge, PromptStats* stats, std::string* retire);
  // The prompt of an anonymous turn scored token by token (TurnParams::prompt_logprobs).
  Status ScorePrompt(std::string_view prompt_text, int top_n, PromptStats* stats);
  // Decodes every choice of the turn from `logits` (the prompt's last) on.
  Status DecodeChoices(MemoryPolicy& policy, std::vector<float> logits, const TurnParams& params,
                       const TurnCallbacks& callbacks, TurnResult* r);
  Status SaveSlot(const store::AgentKey& key, Slot& slot, double* seconds);
  // After the agent's ticket, on a shared store: its lease, and a resident memory that another
  // server wrote since is dropped. Nothing on a local store.
  Result<std::optional<store::AgentLease>> HoldShared(const store::AgentKey& key, Slot& slot);
  void EnforceBudget(const Slot* keep);

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  ThreadPool* threads_;
  store::AgentStore* store_;
  AgentRuntimeOptions options_;
  int64_t n_ctx_;
  PolicyEnv env_;
  MemorySpec default_memory_;
  std::unique_ptr<kv::LayerChunks> chunks_;  // layer memory shared by the agents' pools
  engine::StepBatcher batcher_;  // every forward pass over threads_ (PolicyEnv::compute)
  std::unique_ptr<prefix::PrefixCache> prefix_cache_;  // anonymous turns' prefixes; may be null
  std::mutex registry_mu_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;  // by tenant '/' id
};

}  // namespace kvmem::memory
