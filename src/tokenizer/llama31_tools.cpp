#include "tokenizer/llama31_tools.h"

namespace kvmem::tokenizer {

Result<std::string> RenderLlama31WithTools(const ChatTemplate& tmpl,
                                           std::span<const ChatMessage> messages,
                                           std::span<const std::string> tools,
                                           bool add_generation_prompt) {
  std::string_view system;
  if (!messages.empty() && messages[0].role == "system") {
    system = TrimPythonWhitespace(messages[0].content);
    messages = messages.subspan(1);
  }
  std::string out = "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\n";
  out += "Today Date: " + tmpl.llama31_date + "\n\n";
  out += system;
  out += "<|eot_id|>";
  if (messages.empty()) {
    return InvalidArgument(
        "Cannot put tools in the first user message when there's no first user message!");
  }
  // The template takes the first message after the system one, whatever its role.
  out += "<|start_header_id|>user<|end_header_id|>\n\n";
  out +=
      "Given the following functions, please respond with a JSON for a function call with its "
      "proper arguments that best answers the given prompt.\n\n"
      "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
      "name and its value}.Do not use variables.\n\n";
  for (const std::string& t : tools) out += t + "\n\n";
  out += TrimPythonWhitespace(messages[0].content);
  out += "<|eot_id|>";
  for (const ChatMessage& m : messages.subspan(1)) {
    if (m.role == "ipython" || m.role == "tool") {
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
      out += TrimPythonWhitespace(m.content);
      out += "<|eot_id|>";
    }
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace kvmem::tokenizer
