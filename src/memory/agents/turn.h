// What one turn of AgentRuntime takes and gives back: its parameters, the callbacks its reply
// streams through, and its result (memory/agents/agent_runtime.h runs it).
//
// The sampling surface beyond one plain reply:
//   n > 1        several choices from one prefilled prompt: each decodes on a fork of the
//                prompt's rows (kv::KvSequence::Fork), in order, choice i sampling with seed
//                sampler.seed + i. Anonymous turns only (an agent's memory continues one reply).
//   logprobs     each generated token's log-probability under the model's raw distribution
//                (engine/logprobs.h: before temperature and penalties), with its `logprobs` most
//                likely alternatives, delivered with the text it spells (ReplyDelta).
//   prompt_logprobs  the prompt scored token by token (anonymous turns only); with
//                max_tokens == 0 nothing is generated.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "memory/agents/divergence.h"
#include "memory/agents/tier.h"
#include "memory/policy/memory_policy.h"
#include "memory/store/prefix_match.h"

namespace kvmem::memory {

struct TurnParams {
  int max_tokens = 256;  // generated-token budget (also bounded by the context); 0: score only
  engine::SamplerConfig sampler;
  std::vector<std::string> stop;
  // The focus span (TurnInput::focus): text of the turn's new part (e.g. the question inside an
  // instruction) whose tokens alone score memory; empty: the policy's default.
  std::string focus;
  int n = 1;                     // choices (> 1: anonymous turns only)
  int logprobs = -1;             // -1: none; k in [0, 20]: logprobs with k alternatives
  bool prompt_logprobs = false;  // score the prompt (anonymous turns only; k = max(logprobs, 0))
  // Constrained decoding (response_format, tool calls, a grammar): the state every choice starts
  // from (each decodes on its own Clone); null: none. Outlives the turn.
  const engine::TokenConstraint* constraint = nullptr;
  // The reply's text with its special tokens, harmony's messages not split into what the user
  // sees (tokenizer::ReplyDecoder): for a reader of the whole reply (harmony's tool calls).
  bool raw_reply = false;
  // Anonymous turns: the authenticated tenant whose prefix cache the turn reads and feeds (no
  // tenant ever matches another's prefixes). Ignored for agents (their key names the tenant).
  std::string tenant = "default";
  OnDiverge on_diverge = OnDiverge::kFork;
  // Agents with a server-side conversation (MemorySpec::server_conversation): the turn's prompt
  // composed from the conversation the agent holds ("" when none), called in the agent's turn
  // order; prompt_text is then not used. Unset, or for other agents: prompt_text.
  std::function<Result<std::string>(std::string_view conversation)> continue_conversation;
};

struct PromptStats {
  int64_t prompt_tokens = 0;  // kept + prefilled
  int64_t cached_tokens = 0;  // kept from the agent's cache
  Tier tier = Tier::kMiss;
  store::PrefixMatchKind match = store::PrefixMatchKind::kExact;
  double load_seconds = 0;  // reading a warm cache from the store
  double prefill_seconds = 0;
  Divergence divergence = {};
  // With TurnParams::prompt_logprobs: one entry per prompt token as the model read it (a BOS the
  // tokenizer adds is context, not listed); the first has a NaN logprob when nothing precedes
  // it.
  std::vector<engine::TokenLogprob> logprobs = {};
};

// A piece of one choice's reply: its text (stop sequences removed) and the accounts of the
// tokens generated since the previous piece of that choice (empty unless TurnParams::logprobs
// >= 0). Either may be empty. Valid during the callback.
struct ReplyDelta {
  int choice = 0;
  std::string_view text = {};
  std::span<const engine::TokenLogprob> logprobs = {};
};

struct TurnCallbacks {
  std::function<void(const PromptStats&)> on_prompt;  // once, after the prefill
  std::function<bool(std::string_view)> on_text;      // false: stop (client gone)
  // When set, replaces on_text: every choice's pieces with their logprobs; false: stop.
  std::function<bool(const ReplyDelta&)> on_delta;
};

enum class TurnEnd { kEndOfTurn, kStopSequence, kLength, kCancelled };

// How one choice ended.
struct ChoiceEnd {
  TurnEnd end = TurnEnd::kEndOfTurn;
  std::string stop_sequence = {};
  int64_t completion_tokens = 0;
  // The reply's last token when the rows do not hold it (sampled, not fed back: the reply
  // ended by length, a stop sequence or a complete grammar); -1 otherwise.
  int32_t unfed_token = -1;
};

struct TurnResult {
  PromptStats prompt;
  int64_t completion_tokens = 0;      // all choices'
  TurnEnd end = TurnEnd::kEndOfTurn;  // choice 0's (as stop_sequence)
  std::string stop_sequence;
  std::vector<ChoiceEnd> choices = {};  // (n)
  double decode_seconds = 0;
  double save_seconds = 0;
  int64_t kv_tokens = 0;  // rows the agent's memory holds after the turn
  Json memory_report;     // the policy's Report() of this turn
};

}  // namespace kvmem::memory
