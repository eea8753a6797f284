// The OpenAI dialect: POST /v1/chat/completions, POST /v1/completions and GET /v1/models, as
// the official `openai` clients send and parse them.
//
// Requests are validated strictly (InvalidArgument naming the field, HTTP 400); unknown fields
// are ignored as OpenAI does. Accepted:
//   messages      non-empty array of {role, content}; roles system, developer (= system), user,
//                 assistant, tool; content a string or an array of text parts (images are
//                 Unsupported)
//   tools, tool_choice, parallel_tool_calls, tool calls and results   serve/openai_tools.h
//                 (not with n > 1 or logprobs)
//   response_format, grammar (extension)   serve/constrained_output.h
//   prompt        (/v1/completions) a string, or an array holding one string
//   model         any string (responses name the loaded model)
//   max_tokens, max_completion_tokens   integer in [1, context length]; both → must agree
//   temperature [0, 2], top_p (0, 1], top_k, min_p, repetition_penalty, seed
//   stop          string or array of up to 4 strings
//   n             [1, 16] choices from one prefilled prompt (> 1: not with an agent);
//                 best_of only equal to n
//   stream, stream_options.include_usage
//   user          the agent id (the X-Agent-Id header wins; the two must not disagree)
//   presence_penalty, frequency_penalty  [-2, 2], OpenAI's definition over the reply's tokens
//                 (api_types.h SamplingParams)
//   logprobs      chat: true/false, with top_logprobs [0, 20]; completions: an integer [0, 20]
//                 (alternatives per token; the sampled token is always listed too). Logprobs
//                 are of the model's raw distribution, before temperature and penalties.
//   echo          (/v1/completions) the prompt is prepended to the text; with logprobs, or
//                 max_tokens 0, the prompt is scored: its tokens lead the logprobs, the first
//                 with a null logprob (not with an agent)
// Rejected as Unsupported: functions, logit_bias, suffix.
//
// Streams are `data: {chunk}` events, then `data: [DONE]`: a first chunk with the assistant
// role (per choice), one chunk per text delta (with its tokens' logprobs when asked; choices
// one after another), a chunk with finish_reason per choice, and with
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

// What a reply holds besides text.
struct OpenAiReplyOptions {
  int n = 1;              // choices
  bool logprobs = false;  // each choice carries its tokens' logprobs
  std::string echo = {};  // completions: prepended to each choice's text (echo: the prompt)
};

// chat.completion / chat.completion.chunk objects.
std::unique_ptr<ReplyFormat> MakeChatCompletionReply(ResponseMeta meta, bool include_usage,
                                                     OpenAiReplyOptions options = {});
// text_completion objects.
std::unique_ptr<ReplyFormat> MakeCompletionReply(ResponseMeta meta, bool include_usage,
                                                 OpenAiReplyOptions options = {});

// "stop" for end of turn and stop sequences, "length" for the budget or the context.
const char* OpenAiFinishReason(FinishReason reason);

// GET /v1/models: {"object":"list","data":[model]}; GET /v1/models/{id}: the model object.
std::string OpenAiModelList(const ModelInfo& model);
std::string OpenAiModel(const ModelInfo& model);

}  // namespace kvmem::serve
