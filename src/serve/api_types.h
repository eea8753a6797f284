// The values that cross the seam between the HTTP API and the engine behind it (serve::Backend):
// one generation request as the OpenAI and Anthropic dialects both reduce to it, its result, and
// what an agent's persisted memory looks like from outside. No HTTP here; the dialect files
// (openai_api.h, anthropic_api.h) translate to and from these. Memory-policy configs and reports
// cross as JSON values: they are the policy's own (memory/policy/), opaque to the server.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/step_batcher.h"
#include "memory/agents/divergence.h"
#include "memory/agents/tier.h"
#include "tokenizer/chat_template.h"

namespace kvmem::serve {

// role is "system", "user" or "assistant" (the parsers map OpenAI's "developer" to "system").
using ChatMessage = tokenizer::ChatMessage;
using memory::Divergence;
using memory::OnDiverge;

// Who a request belongs to. The tenant comes from the API key (serve::ApiKey), never from the
// request body, so one tenant cannot name another's agents. The id comes from the OpenAI `user`
// field, Anthropic's `metadata.user_id` or the X-Agent-Id header; empty = anonymous: the
// request is served without reading or writing any persisted memory.
struct AgentRef {
  std::string tenant;
  std::string id;
};

// Sampling settings the client set explicitly; unset ones take the server's defaults (the
// backend's choice: small models need a min_p that the API defaults of 1.0/1.0 would not give).
struct SamplingParams {
  std::optional<float> temperature;     // [0, 2]; 0 = greedy
  std::optional<float> top_p;           // (0, 1]
  std::optional<int> top_k;             // >= 0; 0 = off
  std::optional<float> min_p;           // [0, 1]
  std::optional<float> repeat_penalty;  // (0, 10]; 1 = off
  // OpenAI's: logit[j] -= c[j] * frequency + (c[j] > 0) * presence, c[j] counting token j in
  // the reply so far (not the prompt). [-2, 2]; 0 = off.
  std::optional<float> frequency_penalty;
  std::optional<float> presence_penalty;
  std::optional<uint64_t> seed;  // choice i of n samples with seed + i
};

// A token's log-probability under the model's raw distribution (before temperature and
// penalties), as OpenAI's logprobs report it. `token` is the token's bytes, which may be part
// of a UTF-8 character (JSON output replaces what is not valid).
struct TopLogprob {
  std::string token = {};
  float logprob = 0;
};
struct TokenLogprob {
  std::string token = {};
  std::optional<float> logprob = {};  // none: nothing precedes it (the first token of a prompt)
  std::vector<TopLogprob> top = {};   // most likely first
};

struct GenerationRequest {
  std::string request_id;  // the id the client sees ("chatcmpl-…", "msg_…"), for logs
  AgentRef agent;
  // Chat endpoints: the conversation, validated (non-empty, known roles). The agent's memory is
  // matched against the rendered prompt, so a client resending the whole history each turn hits
  // the agent's cache.
  std::vector<ChatMessage> messages;
  // Anthropic prefill: the last message is an assistant turn that the reply continues, so the
  // prompt ends inside that turn instead of opening a new one.
  bool continue_final_message = false;
  // /v1/completions: raw prompt text, no chat template. Set iff `messages` is empty.
  std::optional<std::string> prompt;
  // Generated-token budget; unset = up to the end of the context. Validated to [1, context]
  // (0 only with prompt_logprobs: the prompt is scored, nothing generated).
  std::optional<int> max_tokens;
  int n = 1;  // choices, each sampled from the same prefilled prompt (> 1: anonymous only)
  // -1: no logprobs; k in [0, 20]: each generated token's logprob with its k most likely
  // alternatives (GenerationSink::OnDelta).
  int logprobs = -1;
  // The prompt scored token by token (PromptInfo::logprobs): completions' echo. Anonymous only.
  bool prompt_logprobs = false;
  SamplingParams sampling;
  // Generation ends before any of these strings; they are never part of the returned text.
  std::vector<std::string> stop;
  // kvmem's extension, "retrieval_query" in either dialect: the focus span of the turn
  // (memory::TurnInput::focus), the text in the new part of the prompt (say, the question
  // inside an instruction) whose tokens alone score the agent's memory; unset: the policy's
  // default. Policies that score nothing ignore it.
  std::optional<std::string> retrieval_query;
  // Constrained decoding (serve/constrained_output.h): the grammar the reply is held to
  // (response_format, tools, the "grammar" extension), compiled by the request parser; null:
  // free text.
  std::shared_ptr<const engine::grammar::Grammar> grammar;
  // A tool format of the model's own template (ToolFormat kLlama31, kQwen): the tool definitions
  // as the template writes them (`messages` then hold the calls and results as it writes them);
  // unset: rendered as plain chat.
  std::optional<std::vector<std::string>> template_tools;
  // The reply as the model wrote it, special tokens included (harmony's tool calls: the reply's
  // reader needs the messages' headers); false: what the user sees.
  bool raw_reply = false;
  // kvmem's extension "on_diverge" in either dialect: what happens to the agent's conversation
  // when this request's does not continue it (memory/agents/divergence.h).
  OnDiverge on_diverge = OnDiverge::kFork;
};

enum class FinishReason {
  kEndOfTurn,     // the model ended its turn (EOS / EOT token)
  kStopSequence,  // one of GenerationRequest::stop matched
  kLength,        // max_tokens reached, or the end of the context
  kCancelled,     // GenerationSink::OnText returned false (client gone, server stopping)
  kToolCalls,     // the reply calls tools (set by serve/tool_reply.h, never by a backend)
};

// One call of a client-defined tool in a reply (serve/tool_calls.h).
struct ToolCall {
  std::string id{};         // "call_…" (OpenAI) or "toolu_…" (Anthropic)
  std::string name{};
  std::string arguments{};  // a JSON object, as the model wrote it
};

// Where the agent's reused prefix came from.
using memory::Tier;

struct Usage {
  int64_t prompt_tokens = 0;      // all prompt tokens, cached ones included
  int64_t cached_tokens = 0;      // prompt tokens reused from the agent's cache (not prefilled)
  int64_t completion_tokens = 0;  // generated tokens, the stop sequence's included
  Divergence divergence = {};     // what the request did to its agent's conversation
};

struct PromptInfo {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  Tier tier = Tier::kMiss;
  Divergence divergence = {};
  std::vector<TokenLogprob> logprobs = {};  // GenerationRequest::prompt_logprobs: each token
};

// How one of the n choices ended.
struct ChoiceResult {
  FinishReason finish_reason = FinishReason::kEndOfTurn;
  std::string stop_sequence = {};
};

struct GenerationResult {
  FinishReason finish_reason = FinishReason::kEndOfTurn;  // choice 0's
  std::string stop_sequence;  // the stop string that matched (kStopSequence only)
  std::vector<ChoiceResult> choices = {};  // (n); empty: one choice, as above
  std::vector<ToolCall> tool_calls = {};   // kToolCalls only (choice 0's)
  Usage usage;                             // completion_tokens: all choices'
  Tier tier = Tier::kMiss;
};

// POST /v1/agents: an agent created before its first turn, with its memory policy.
struct AgentCreateRequest {
  std::string id;
  std::string policy;                               // empty: the server's default
  nlohmann::json config = nlohmann::json::object();  // the policy's; validated by the backend
  // "conversation": "server": each request's messages are appended to the conversation the
  // agent holds (a client sends only what is new); "client" (default): requests resend it.
  bool server_conversation = false;
  std::optional<int> max_checkpoints;  // conversations kept when requests diverge; unset: 4
};

// A conversation an agent had before a request diverged from it (GET /v1/agents/{id}).
struct CheckpointInfo {
  std::string id;
  int64_t tokens = 0;
  int64_t bytes = 0;  // on disk, blocks shared with other conversations included
  int64_t last_used_unix = 0;
};

// An agent's persisted memory as the /v1/agents endpoints show it.
struct AgentInfo {
  std::string id;
  std::string tenant;
  int64_t cached_tokens = 0;          // tokens whose K/V rows the agent holds
  int64_t bytes = 0;                  // bytes of those rows where they live now
  Tier tier = Tier::kWarm;  // kHot: resident in memory; kWarm: only in the store
  std::string kv_format;              // "f16", "q8_0", "q4_0", "kivi4", … (K/V: "q8_0/f16")
  std::string policy;                 // the memory policy (GET /v1/policies names them)
  nlohmann::json config = nlohmann::json::object();  // its config, as parsed
  int64_t last_used_unix = 0;  // seconds since the epoch; 0 = never
  nlohmann::json last_turn;    // the policy's report of the latest turn since loaded; null
  bool server_conversation = false;
  int max_checkpoints = 0;
  std::vector<CheckpointInfo> checkpoints = {};  // GET /v1/agents/{id} only
};

// How the model is shown tools and writes calls (serve/tool_calls.h): kvmem's generic JSON
// format, or the one the model's chat template has: Llama 3.1's (tokenizer/llama31_tools.h),
// Qwen 2.5/3's (tokenizer/qwen_tools.h), GPT-OSS's harmony (tokenizer/harmony.h).
enum class ToolFormat { kGeneric, kLlama31, kQwen, kHarmony };

struct ModelInfo {
  std::string name;  // what responses report as `model`
  int context_length = 0;
  int64_t created_unix = 0;
  ToolFormat tool_format = ToolFormat::kGeneric;
  // The sentence encoder behind /v1/embeddings (its directory's name) and the size of its
  // vectors; empty and 0 when the server has none.
  std::string embedding_model = {};
  int embedding_dim = 0;
};

// POST /tokenize: one token of a text with the bytes it stands for (part of a UTF-8 character
// where the tokenizer split one).
struct TokenPiece {
  int32_t id = 0;
  std::string piece = {};
};

// POST /v1/embeddings: the sentence encoder's unit vectors of some texts.
struct Embeddings {
  std::vector<float> vectors = {};  // (n_texts, ModelInfo::embedding_dim) row-major
  int64_t tokens = 0;               // encoder tokens of all texts, [CLS] and [SEP] included
};

// Gauges the backend reports when /metrics is scraped.
struct BackendStats {
  int64_t store_bytes = 0;      // bytes of all agents' caches in the persistent store
  int64_t hot_bytes = 0;        // bytes of KV rows resident in memory
  int64_t agents_hot = 0;       // agents with their cache resident
  int64_t agents_stored = 0;    // agents with a cache in the store
  int64_t queued_requests = 0;  // admitted requests waiting for their agent or a batch slot
  engine::StepStats steps;      // the batched forward steps so far
  // The prefix cache of requests without an agent (memory/prefix/prefix_cache.h).
  int64_t prefix_cache_hit_tokens = 0;     // prompt tokens read from it, all lookups
  int64_t prefix_cache_lookup_tokens = 0;  // prompt tokens looked up (all but each last one)
  int64_t prefix_cache_bytes = 0;          // KV bytes of the pool blocks it holds
  int64_t prefix_cache_evictions = 0;      // cached prefixes (tree leaves) evicted
};

const char* FinishReasonName(FinishReason reason);  // "end_turn", "stop_sequence", …

}  // namespace kvmem::serve
