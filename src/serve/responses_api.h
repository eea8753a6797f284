// OpenAI's Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}, as the official
// `openai` client's responses.create (streamed or not), responses.stream, responses.retrieve and
// responses.delete send and parse them.
//
// A chain of responses is one kvmem agent, so `previous_response_id` continues from that
// agent's KV cache without the client resending anything, across restarts: a response without
// previous_response_id starts the agent named by its own id ("resp_…", the request's tenant);
// one continuing response P runs on P's agent. The prompt is the chat template applied to
// [instructions of this request as a system message] + P's conversation (P's input items and
// output, P's own instructions excluded, as OpenAI does) + the new input items; the agent's
// cache matches it by prefix (usage.input_tokens_details.cached_tokens). Two responses may
// continue the same P (branches): the runtime re-prefills from where they diverge.
//
// Each stored response is a record kept by the Backend (PutResponse; the AgentStore's
// responses/ directory in production): {"response": the object as returned, "agent": its
// agent's id, "messages": [{role, content}, …] the conversation through its output}. store:
// false keeps nothing (GET is 404) and runs the turn without an agent (anonymous; the prefix
// cache still applies). DELETE forgets the record, not the agent.
//
// Request fields (others are ignored, as the chat parser ignores unknown fields):
//   input                a string (one user message) or an array of messages {role: user,
//                        system, developer (= system) or assistant; content: a string or an
//                        array of input_text / output_text parts}, with or without
//                        "type": "message"; other item types are Unsupported
//   instructions         a string: the system message of this request only
//   previous_response_id a stored response of the same tenant (404 otherwise)
//   store (default true), stream, metadata (an object, echoed), max_output_tokens [1, context],
//   temperature [0, 2], top_p (0, 1] (and kvmem's top_k, min_p, seed, repetition_penalty),
//   text.format         {"type": "text" | "json_object"} or {"type": "json_schema", "name",
//                        "schema", "strict"} (serve/constrained_output.h)
//   user, prompt_cache_key, tool_choice, parallel_tool_calls, reasoning, truncation: echoed or
//                        ignored (the agent is the chain's, never `user` or X-Agent-Id)
// Rejected as Unsupported: tools (a non-empty array), background, conversation, prompt.
//
// Streams are `event: <type>` + `data: <json>` events with increasing sequence_number:
// response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta…, response.output_text.done,
// response.content_part.done, response.output_item.done, then response.completed (or
// response.incomplete when max_output_tokens ended it); an error after the start is
// response.failed. The record is saved before the last event (or the whole reply) is sent.
// Thread-safety: pure functions over a Backend (thread-safe); a ReplyFormat belongs to one
// request.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/generation_route.h"

namespace kvmem::serve {

// Parses a POST /v1/responses body; reads the previous response's record from `backend`.
Result<ParsedRequest> ParseResponsesRequest(std::string_view body, const RequestContext& ctx,
                                            Backend& backend);

// Where a finished response is kept; backend null: store false.
struct ResponseStorage {
  Backend* backend = nullptr;
  std::string tenant = {};
  std::string agent = {};
  std::vector<ChatMessage> conversation = {};  // the record's messages before the output
};

// The response objects and stream events of one request. `echo` holds the request-derived
// fields of the object (instructions, previous_response_id, store, temperature, …).
std::unique_ptr<ReplyFormat> MakeResponsesReply(ResponseMeta meta, Json echo,
                                                ResponseStorage storage);

// A record's parts (see above); Corrupt when the record does not have that shape.
Json ResponseRecord(const Json& response, const std::string& agent,
                    const std::vector<ChatMessage>& messages);
Result<std::vector<ChatMessage>> RecordMessages(const Json& record);

// The routes: POST /v1/responses, GET|DELETE /v1/responses/{id}.
void ServeResponseCreate(const GenerationContext& ctx, const httplib::Request& req,
                         std::string_view body, httplib::Response& res, const std::string& tenant);
void ServeResponseById(Backend& backend, const httplib::Request& req, httplib::Response& res,
                       const std::string& tenant);

}  // namespace kvmem::serve
