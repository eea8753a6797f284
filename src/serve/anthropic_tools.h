// Tools in the Anthropic dialect (/v1/messages): reading `tools`, `tool_choice` and the
// tool_use / tool_result content blocks into the generic format (serve/tool_calls.h).
// Accepted:
//   tools        [{name, description?, input_schema, type?: "custom"}] (server tools such as
//                web_search are Unsupported)
//   tool_choice  {type: "auto" | "any" | "none" | "tool" (with name), disable_parallel_tool_use?}
//   content      assistant: text and tool_use {id, name, input} blocks; user: text and
//                tool_result {tool_use_id, content: string | text blocks, is_error?} blocks
// Thread-safety: pure functions.
#pragma once

#include "core/status.h"
#include "serve/api_types.h"
#include "serve/json_body.h"

namespace kvmem::serve {

// Whether the request involves tools: a non-empty `tools`, or a tool_use / tool_result block.
bool UsesAnthropicTools(const Json& body);

// The conversation (after `system`, already in out->messages) and tools in the model's tool
// format (serve/tool_calls.h ApplyTools). InvalidArgument naming the field.
Status ReadAnthropicToolRequest(const Json& body, ToolFormat format, GenerationRequest* out);

}  // namespace kvmem::serve
