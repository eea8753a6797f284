// The Anthropic dialect: POST /v1/messages (and GET /v1/models when the client sends an
// anthropic-version header), as the official `anthropic` clients send and parse them.
//
// Requests are validated strictly (InvalidArgument naming the field, HTTP 400); unknown fields
// are ignored. Accepted:
//   model          any string (responses name the loaded model)
//   max_tokens     required, integer in [1, context length]
//   messages       non-empty array of {role: user|assistant, content}; content a string or an
//                  array of text, tool_use and tool_result blocks (images and documents are
//                  Unsupported). A final assistant message is a prefill: the reply continues it
//                  (not with tools).
//   tools, tool_choice   serve/anthropic_tools.h
//   system         a string or an array of text blocks
//   stop_sequences array of up to 16 non-empty strings
//   temperature [0, 1], top_p (0, 1], top_k, plus the extensions min_p, repetition_penalty, seed
//   stream
//   metadata.user_id  the agent id (the X-Agent-Id header wins; the two must not disagree)
// Rejected as Unsupported: thinking of type "enabled".
//
// Usage follows Anthropic's split: input_tokens counts only the prompt tokens that were
// prefilled, cache_read_input_tokens the ones reused from the agent's cache (their sum is the
// whole prompt); kvmem never bills cache creation, so cache_creation_input_tokens is 0.
// Streams are the named events message_start, content_block_start, ping, content_block_delta
// (text_delta)…, content_block_stop, message_delta (stop_reason, cumulative usage),
// message_stop; with tool calls, a tool_use content_block_start and input_json_delta deltas per
// call, and stop_reason "tool_use". An error after the start is an `error` event.
// Thread-safety: pure functions; each ReplyFormat belongs to one request.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/reply_format.h"
#include "serve/request_fields.h"

namespace kvmem::serve {

Result<ParsedRequest> ParseMessagesRequest(std::string_view body, const RequestContext& ctx);

// POST /v1/messages/count_tokens: model, system, messages, tools, tool_choice as /v1/messages
// takes them (no max_tokens), parsed into the request whose prompt is counted; the reply is
// {"input_tokens": N}, the tokens of the whole prompt as kvmem renders it (chat template, system,
// tools), which is the prompt_tokens a request naming no agent reports.
Result<GenerationRequest> ParseCountTokensRequest(std::string_view body, const RequestContext& ctx);
std::string CountTokensJson(int64_t input_tokens);

// With `tools`, content blocks open as their content comes (a reply may be tool_use blocks
// only); without, the text block opens with the stream, as Anthropic's do.
std::unique_ptr<ReplyFormat> MakeMessagesReply(ResponseMeta meta, bool tools = false);

// "end_turn", "stop_sequence", "max_tokens".
const char* AnthropicStopReason(FinishReason reason);

// GET /v1/models in Anthropic's shape: {"data":[…],"has_more":false,"first_id","last_id"}.
std::string AnthropicModelList(const ModelInfo& model);
std::string AnthropicModel(const ModelInfo& model);

}  // namespace kvmem::serve
