#include "serve/qwen_tools.h"

#include <string>

#include "serve/llama31_tools.h"
#include "tokenizer/qwen_tools.h"

namespace kvmem::serve {
namespace {

using OJson = nlohmann::ordered_json;

std::string ToolDefinition(const ToolDef& tool) {
  OJson fn = {{"name", tool.name}};
  if (!tool.description.empty()) fn["description"] = tool.description;
  fn["parameters"] = OJson::parse(DumpJson(tool.parameters));  // keys in name order
  return PythonJsonDumps(OJson{{"type", "function"}, {"function", std::move(fn)}});
}

// The assistant's text, then each call in its block, as the template writes them.
Result<std::string> AssistantText(const ToolTurn& turn, const std::string& field) {
  std::string out = turn.text;
  for (const ToolCall& call : turn.calls) {
    OJson args = call.arguments.empty()
                     ? OJson::object()
                     : OJson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) {
      return FieldError(field, "the arguments of '" + call.name + "' are not JSON");
    }
    if (!out.empty()) out += "\n";
    out += tokenizer::kQwenCallOpen;
    out += "{\"name\": \"" + call.name + "\", \"arguments\": " + PythonJsonDumps(args) + "}";
    out += tokenizer::kQwenCallClose;
  }
  return out;
}

}  // namespace

Status ApplyQwenTools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                      GenerationRequest* out) {
  std::vector<std::string> tools;
  for (const ToolDef& t : request.tools) tools.push_back(ToolDefinition(t));
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ToolTurn& t = turns[i];
    if (t.role == "assistant" && !t.calls.empty()) {
      KVMEM_ASSIGN_OR_RETURN(std::string text,
                             AssistantText(t, "messages[" + std::to_string(i) + "]"));
      messages.push_back({"assistant", std::move(text)});
    } else {
      messages.push_back({t.role, t.text});  // a tool result is rendered by the template
    }
  }
  out->messages = std::move(messages);
  out->template_tools = std::move(tools);
  if (request.choice.mode == ToolChoiceMode::kRequired ||
      request.choice.mode == ToolChoiceMode::kNamed) {
    KVMEM_ASSIGN_OR_RETURN(out->grammar, QwenCallGrammar(request));
  }
  return Status::Ok();
}

}  // namespace kvmem::serve
