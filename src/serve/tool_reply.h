// The reply of a request with tools: a ReplyFormat that reads the model's output in the generic
// tool format (serve/tool_calls.h) and drives the dialect's own reply with what it says (reply
// text, tool calls as they start and their arguments as they come), so each dialect streams
// calls its own way (OpenAI delta.tool_calls, Anthropic tool_use blocks and input_json_delta).
// A reply with complete calls that ended its turn finishes with FinishReason::kToolCalls.
// Thread-safety: one per request, as every ReplyFormat.
#pragma once

#include <memory>
#include <string>

#include "serve/reply_format.h"

namespace kvmem::serve {

// `id_prefix`: "call_" (OpenAI) or "toolu_" (Anthropic); `format`: the model's (ModelInfo).
std::unique_ptr<ReplyFormat> MakeToolReply(std::unique_ptr<ReplyFormat> inner,
                                           std::string id_prefix, ToolFormat format);

}  // namespace kvmem::serve
