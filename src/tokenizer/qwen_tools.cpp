#include "tokenizer/qwen_tools.h"

#include <vector>

namespace kvmem::tokenizer {
namespace {

constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsHowTo =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

}  // namespace

Result<std::string> RenderQwenWithTools(const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages,
                                        std::span<const std::string> tools,
                                        bool add_generation_prompt) {
  if (tmpl.kind != ChatTemplateKind::kChatMl || !tmpl.qwen_tools) {
    return InvalidArgument("not a chat template with Qwen's tool format");
  }
  std::vector<ChatMessage> out;
  if (!tools.empty()) {
    // Qwen 2.5 writes its default system message before the tools; Qwen 3 has none.
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = messages[0].content + "\n\n";
      messages = messages.subspan(1);
    } else if (!tmpl.default_system_prompt.empty()) {
      system = tmpl.default_system_prompt + "\n\n";
    }
    system += kToolsIntro;
    for (const std::string& t : tools) system += "\n" + t;
    system += kToolsHowTo;
    out.push_back({"system", std::move(system)});
  }
  bool in_results = false;  // out.back() is the user turn of the latest tool results
  for (const ChatMessage& m : messages) {
    if (m.role != "tool") {
      out.push_back(m);
      in_results = false;
      continue;
    }
    const std::string result = "<tool_response>\n" + m.content + "\n</tool_response>";
    if (in_results) {
      out.back().content += "\n" + result;
    } else {
      out.push_back({"user", result});
      in_results = true;
    }
  }
  return RenderChat(tmpl, out, add_generation_prompt);
}

}  // namespace kvmem::tokenizer
