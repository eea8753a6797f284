// The seam between the HTTP API and the engine: everything the server needs from the model,
// the agents' memory and the scheduler, as one abstract class. The server parses and validates
// requests, calls a Backend, and formats what comes back; it never sees tokens or KV rows. Tests
// drive the server with a fake Backend (tests/serve/fake_backend.h).
//
// Errors are Status values; the server maps their codes to HTTP statuses in one place
// (serve/api_error.h):
//   kInvalidArgument, kUnsupported               → 400
//   kOutOfRange                                  → 400 context_length_exceeded (a prompt longer
//                                                  than the context)
//   kUnauthenticated                             → 401
//   kNotFound                                    → 404 (unknown agent)
//   kFailedPrecondition                          → 409 (e.g. delete during a generation)
//   kResourceExhausted, kUnavailable             → 503 OpenAI / 529 Anthropic, with
//                                                  Retry-After (queue or KV pool full,
//                                                  shutting down: try again later)
//   kIo, kCorrupt, kInternal                     → 500 (server faults only; the detail goes to
//                                                  the log, not to the client)
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "memory/agents/inspection.h"
#include "memory/policy/segments.h"
#include "serve/api_types.h"

namespace kvmem::serve {

// Receives one generation's progress. Implemented by the server; called by the backend from
// whatever thread runs the generation, never from two threads at once.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;

  // Once, when the request has been admitted and its prompt prefilled (usage of the prompt is
  // known), before the first OnText. Until then a failure is reported to the client as an HTTP
  // error status; after it, as an error event inside the already started stream. A backend
  // that never calls it only loses that precision (the first OnText counts as the start).
  virtual void OnPrompt(const PromptInfo& prompt) = 0;

  // Each piece of generated text, in order, stop sequences already removed. Pieces may split
  // a UTF-8 sequence (the server reassembles them). Returns false when nobody wants more text
  // (the client disconnected, the server is stopping): the backend then stops generating as
  // soon as it can and returns FinishReason::kCancelled. Must not block for long.
  virtual bool OnText(std::string_view piece) = 0;

  // A piece of choice `choice` with the logprobs of the tokens generated since that choice's
  // previous piece (either may be empty); the same contract as OnText. Backends call it for
  // requests with n > 1 or logprobs; a sink that knows neither sees choice 0's text.
  struct Delta {
    int choice = 0;
    std::string_view text = {};
    std::span<const TokenLogprob> logprobs = {};
  };
  virtual bool OnDelta(const Delta& delta) { return delta.choice != 0 || OnText(delta.text); }
};

// Thread-safe: the server calls every method from many threads at once. Requests for one
// agent (same tenant and id) must run in arrival order, one at a time, because each continues
// the KV cache the previous one left; requests for different agents may run in parallel or be
// batched together. That ordering is the backend's job.
class Backend {
 public:
  virtual ~Backend() = default;

  // Runs one generation to its end, streaming text through `sink`; blocks until done.
  // `request` has been validated by the server (see GenerationRequest). Returns the finish
  // reason and usage; on error, no more sink calls are made after the returned Status.
  virtual Result<GenerationResult> Generate(const GenerationRequest& request,
                                            GenerationSink* sink) = 0;

  // Creates the agent with the requested memory policy (the server parsed the request's shape;
  // the backend validates the policy and its config: InvalidArgument listing the valid ones).
  // FailedPrecondition if it exists.
  virtual Result<AgentInfo> CreateAgent(const std::string& tenant,
                                        const AgentCreateRequest& request) = 0;
  // The tenant's agents with persisted memory, in any order.
  virtual Result<std::vector<AgentInfo>> ListAgents(const std::string& tenant) = 0;
  // NotFound for an agent this tenant does not have.
  virtual Result<AgentInfo> GetAgent(const std::string& tenant, const std::string& id) = 0;
  // Forgets the agent: its cache in memory and in the store. NotFound if there is none. Waits
  // for (or rejects) a generation of that agent in progress: that choice is the backend's.
  virtual Status DeleteAgent(const std::string& tenant, const std::string& id) = 0;
  // POST /v1/agents/{id}/rebuild: the agent's memory re-organized from its history
  // (MemoryPolicy::Rebuild); what it did, null when its policy has nothing to rebuild.
  // NotFound if there is no such agent.
  virtual Result<nlohmann::json> RebuildAgent(const std::string& tenant, const std::string& id) = 0;
  // The agent's memory segments (memory/policy/segments.h): GET /v1/agents/{id}/segments, PUT
  // and DELETE /v1/agents/{id}/segments/{name}; what MemoryPolicy::Segments returns. NotFound
  // for an agent this tenant does not have (or, deleting, a segment it does not hold);
  // Unsupported for an agent whose policy has no segments. A write is durable when this returns;
  // a failed one changed nothing.
  virtual Result<nlohmann::json> AgentSegments(const std::string& tenant, const std::string& id,
                                               const memory::SegmentRequest& request) = 0;

  // The memory inspector (serve/inspector_api.h). GET /v1/agents/{id}/memory: the agent's
  // memory as it is (brings a stored agent into RAM, after its queued turns); GET
  // /v1/agents/{id}/turns: its last turns, oldest first. NotFound for an agent this tenant does
  // not have.
  virtual Result<memory::AgentMemoryView> InspectAgent(const std::string& tenant,
                                                       const std::string& id) = 0;
  virtual Result<std::vector<memory::TurnRecord>> AgentTurns(const std::string& tenant,
                                                             const std::string& id) = 0;

  // The Responses API's stored responses (serve/responses_api.h): one JSON record per (tenant,
  // response id), opaque to the backend, kept durably where the agents' memory is (a save is
  // acknowledged once it would survive a crash). Get and Delete: NotFound when the tenant has no
  // such record.
  virtual Status PutResponse(const std::string& tenant, const std::string& id,
                             const nlohmann::json& record) = 0;
  virtual Result<nlohmann::json> GetResponse(const std::string& tenant, const std::string& id) = 0;
  virtual Status DeleteResponse(const std::string& tenant, const std::string& id) = 0;

  // POST /tokenize: text as the model's tokens. add_special: BOS/EOS where the model adds them;
  // parse_special: control-token texts ("<|im_start|>") become their ids.
  virtual std::vector<TokenPiece> Tokenize(std::string_view text, bool add_special,
                                           bool parse_special) const = 0;
  // POST /detokenize: the text of token ids, control tokens written out. InvalidArgument naming
  // "tokens[i]" for an id outside the vocabulary.
  virtual Result<std::string> Detokenize(std::span<const int32_t> ids) const = 0;
  // POST /v1/messages/count_tokens: the tokens of the prompt `request` renders to (system and
  // tools included), as a request naming no agent prefills them.
  virtual Result<int64_t> CountPromptTokens(const GenerationRequest& request) const = 0;
  // POST /v1/embeddings; called only when model().embedding_dim > 0.
  virtual Result<Embeddings> Embed(std::span<const std::string> texts) const = 0;

  // GET /v1/policies: every memory policy with its description, config fields (defaults,
  // bounds) and presets for the served model.
  virtual nlohmann::ordered_json Policies() const = 0;

  virtual ModelInfo model() const = 0;
  // Gauges for /metrics; called on every scrape, so cheap.
  virtual BackendStats stats() const = 0;
};

}  // namespace kvmem::serve
