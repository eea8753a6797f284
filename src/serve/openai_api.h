// The OpenAI dialect: POST /v1/chat/completions, POST /v1/completions and GET /v1/models, as
// the official `openai` clients send and parse them.
//
// Requests are validated strictly (InvalidArgument naming the field, HTTP 400); unknown fields
// are ignored as OpenAI does. Accepted:
//   messages      non-empty array of {role, content}; roles system, developer (= system), user,
//                 assistant, tool; content a string or an array of text parts (images are
//                 Unsupported)
//   tools, tool_choice, parallel_tool_calls, tool calls and results   serve/openai_tools.h
//   response_format, grammar (extension)   serve/constrained_output.h
//   prompt        (/v1/completions) a string, or an array holding one string
//   model         any string (responses name the loaded model)
//   max_tokens, max_completion_tokens   integer in [1, context length]; both → must agree
//   temperature [0, 2], top_p (0, 1], top_k, min_p, repetition_penalty, seed
//   stop          string or array of up to 4 strings
//   n, best_of    1 only
//   stream, stream_options.include_usage
//   user          the agent id (the X-Agent-Id header wins; the two must not disagree)
//   presence_penalty, frequency_penalty  range-checked ([-2, 2]) and ignored
//   echo          (/v1/completions) the prompt is prepended to the text
// Rejected as Unsupported: functions, logprobs, top_logprobs, logit_bias, suffix.
//
// Streams are `data: {chunk}` events, then `data: [DONE]`: a first chunk with the assistant
// role, one chunk per text delta, a chunk with finish_reason, and with
// stream_options.include_usage a last chunk with empty choices and the usage (every earlier
// chunk then carries "usage": null), as OpenAI sends them.
// Thread-safety: pure functions; each ReplyFormat belongs to one request.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/reply_format.h"
#include "serve/request_fields.h"

namespace kvmem::serve {

Result<ParsedRequest> ParseChatCompletionRequest(std::string_view body, const RequestContext& ctx);
Result<ParsedRequest> ParseCompletionRequest(std::string_view body, const RequestContext& ctx);

// chat.completion / chat.completion.chunk objects.
std::unique_ptr<ReplyFormat> MakeChatCompletionReply(ResponseMeta meta, bool include_usage);
// text_completion objects; `echo` is prepended to the text (the prompt, when echo is true).
std::unique_ptr<ReplyFormat> MakeCompletionReply(ResponseMeta meta, bool include_usage,
                                                 std::string echo);

// "stop" for end of turn and stop sequences, "length" for the budget or the context.
const char* OpenAiFinishReason(FinishReason reason);

// GET /v1/models: {"object":"list","data":[model]}; GET /v1/models/{id}: the model object.
std::string OpenAiModelList(const ModelInfo& model);
std::string OpenAiModel(const ModelInfo& model);

}  // namespace kvmem::serve
