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
// continue the same P (branches): the agent forks (kvmem's on_diverge, "fork" by default:
// memory/agents/divergence.h), keeping the conversation it leaves as a checkpoint that a later
// continuation of it resumes.
//
// Each stored response is a record kept by the Backend (PutResponse; the AgentStore's
// responses/ directory in production): {"response": the object as returned, "agent": its
// agent's id, "messages": the conversation through its output, as chat completions messages
// (tool calls and results included)}. store: false keeps nothing (GET is 404) and runs the turn
// without an agent (anonymous; the prefix cache still applies). DELETE forgets the record, not
// the agent.
//
// Request fields (others are ignored, as the chat parser ignores unknown fields):
//   input                a string (one user message) or an array of items: messages {role:
//                        user, system, developer (= system) or assistant; content: a string or
//                        an array of input_text / output_text parts}, with or without "type":
//                        "message"; function_call {call_id, name, arguments} and
//                        function_call_output {call_id, output}; other item types are Unsupported
//   instructions         a string: the system message of this request only
//   previous_response_id a stored response of the same tenant (404 otherwise)
//   store (default true), stream, metadata (an object of strings, echoed), max_output_tokens
//   [1, context], temperature [0, 2], top_p (0, 1] (and kvmem's top_k, min_p, seed,
//   repetition_penalty)
//   text.format          {"type": "text" | "json_object"} or {"type": "json_schema", "name",
//                        "schema", "strict"} (serve/constrained_output.h; not with tools)
//   tools                [{type: "function", name, description, parameters, strict}], with
//                        tool_choice ("auto", "none", "required", {type: "function", name}) and
//                        parallel_tool_calls: read as chat completions reads them
//                        (serve/openai_tools.h); other tool types are Unsupported. Like
//                        instructions, tools are not carried over from the previous response.
//   on_diverge, retrieval_query: kvmem's extensions, as in chat completions
//   user, prompt_cache_key, reasoning, truncation: ignored (the agent is the chain's, never
//                        `user` or X-Agent-Id)
// Refused with a 400 naming the field: background, conversation, prompt.
//
// Streams are `event: <type>` + `data: <json>` events with increasing sequence_number:
// response.created, response.in_progress; per output item, as it starts: the message
// (response.output_item.added, response.content_part.added, response.output_text.delta…) or a
// function call (response.output_item.added, response.function_call_arguments.delta…); at the
// end, each item's done events (response.output_text.done and response.content_part.done, or
// response.function_call_arguments.done; response.output_item.done), then response.completed
// (or response.incomplete when max_output_tokens ended it); an error after the start is
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
  Json conversation = Json::array();  // the record's messages before the output
};

// The response objects and stream events of one request. `echo` holds the request-derived
// fields of the object (instructions, previous_response_id, store, temperature, …).
std::unique_ptr<ReplyFormat> MakeResponsesReply(ResponseMeta meta, Json echo,
                                                ResponseStorage storage);

// A record's parts (see above); Corrupt when the record does not have that shape. `messages`
// are chat completions messages (tool calls and results as serve/openai_tools.h reads them).
Json ResponseRecord(const Json& response, const std::string& agent, const Json& messages);
Result<Json> RecordMessages(const Json& record);

// The routes: POST /v1/responses, GET|DELETE /v1/responses/{id}.
void ServeResponseCreate(const GenerationContext& ctx, const httplib::Request& req,
                         std::string_view body, httplib::Response& res, const std::string& tenant);
void ServeResponseById(Backend& backend, const httplib::Request& req, httplib::Response& res,
                       const std::string& tenant);

}  // namespace kvmem::serve
