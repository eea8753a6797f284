// Qwen 2.5 and Qwen 3's own tool format (the Hermes-style <tool_call> tags), as their official
// templates render tools: the tool definitions, one JSON line each inside <tools></tools>, and
// how to call them close the system turn (after the system message, or the template's default
// one, or alone); a call is "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>" in the
// assistant's turn, after its text; the results of consecutive tool messages share one user turn,
// each inside <tool_response></tool_response>. Checked against the templates rendered by jinja2
// (tests/data/tokenizer/qwen_tool_vectors.json).
// Thread-safe: pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace kvmem::tokenizer {

// How an assistant's call is written, without the newline that separates it from what precedes.
inline constexpr std::string_view kQwenCallOpen = "<tool_call>\n";
inline constexpr std::string_view kQwenCallClose = "\n</tool_call>";

// `tmpl` a ChatML template with qwen_tools. `messages`: chat messages and "tool" results; an
// assistant message that calls tools holds its text and the calls as the template writes them
// (the caller serializes them). `tools`: each definition as the template's tojson writes it;
// empty: no tools block (the template's rendering without tools).
Result<std::string> RenderQwenWithTools(const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages,
                                        std::span<const std::string> tools,
                                        bool add_generation_prompt);

}  // namespace kvmem::tokenizer
