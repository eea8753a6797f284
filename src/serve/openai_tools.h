// Tools in the OpenAI dialect (chat completions): reading `tools`, `tool_choice`,
// `parallel_tool_calls`, assistant `tool_calls` and `role: "tool"` messages into the generic
// format (serve/tool_calls.h), and the JSON of calls in replies and stream chunks.
// Accepted:
//   tools        [{type: "function", function: {name, description?, parameters?, strict?}}]
//   tool_choice  "auto" | "none" | "required" | {type: "function", function: {name}}
//   parallel_tool_calls  boolean (false: one call per turn at most)
//   messages     assistant {content: string|null, tool_calls: [{id, type: "function",
//                function: {name, arguments: string}}]}; tool {tool_call_id, content}
// The legacy `functions` / `function_call` fields are Unsupported.
// Thread-safety: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"
#include "serve/json_body.h"

namespace kvmem::serve {

// Whether the request involves tools: a non-empty `tools`, a `tool_choice`, or a message with
// role "tool" or assistant tool_calls.
bool UsesOpenAiTools(const Json& body);

// Fills out->messages, out->grammar and out->template_tools (serve/tool_calls.h ApplyTools) in
// the model's tool format. InvalidArgument naming the field for a malformed tool, choice or
// message; also when combined with response_format or grammar.
Status ReadOpenAiToolRequest(const Json& body, ToolFormat format, GenerationRequest* out);

// message.tool_calls of a whole reply.
Json OpenAiToolCalls(const std::vector<ToolCall>& calls);
// One element of a chunk's delta.tool_calls: the call's start (id, type, name, "" arguments)
// when `call` is given, else a piece of its arguments.
Json OpenAiToolCallDelta(int index, const ToolCall* call, std::string_view arguments);

}  // namespace kvmem::serve
