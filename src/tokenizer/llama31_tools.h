// Llama 3.1's own tool format, as its official templates (3.1, 3.2, 3.3) render custom tools
// with tools_in_user_message (their default): the system turn opens with "Environment:
// ipython", the tool definitions and the instruction to answer with
// {"name": function name, "parameters": {…}} open the first user message, a tool call is an
// assistant turn holding that JSON, and a tool result is an "ipython" turn. Checked against the
// templates rendered by jinja2 (tests/data/tokenizer/llama31_tool_vectors.json).
// Thread-safe: pure functions.
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace kvmem::tokenizer {

// `messages`: an optional leading system message, then user, assistant and "ipython" messages;
// an assistant message that calls a tool holds the call's JSON as its content, an ipython
// message its content as the template writes it (the caller serializes both). `tools`: each
// definition as the template's tojson(indent=4) writes it. InvalidArgument where the template
// raises (tools and no message after the system one).
Result<std::string> RenderLlama31WithTools(const ChatTemplate& tmpl,
                                           std::span<const ChatMessage> messages,
                                           std::span<const std::string> tools,
                                           bool add_generation_prompt);

}  // namespace kvmem::tokenizer
