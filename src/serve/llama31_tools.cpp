#include "serve/llama31_tools.h"

namespace kvmem::serve {
namespace {

using OJson = nlohmann::ordered_json;

std::string ToolDefinition(const ToolDef& tool) {
  Json fn = {{"name", tool.name}, {"parameters", tool.parameters}};
  if (!tool.description.empty()) fn["description"] = tool.description;
  const Json t = {{"function", std::move(fn)}, {"type", "function"}};
  return t.dump(4, ' ', false, Json::error_handler_t::replace);
}

Result<std::string> CallText(const ToolCall& call, const std::string& field) {
  OJson args = OJson::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) {
    return FieldError(field, "the arguments of '" + call.name + "' are not JSON");
  }
  return "{\"name\": " + PythonJsonDumps(OJson(call.name)) +
         ", \"parameters\": " + PythonJsonDumps(args) + "}";
}

}  // namespace

std::string PythonJsonDumps(const OJson& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, v] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += PythonJsonDumps(OJson(key)) + ": " + PythonJsonDumps(v);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      out += PythonJsonDumps(value[i]);
    }
    return out + "]";
  }
  return value.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

Status ApplyLlama31Tools(const ToolRequest& request, const std::vector<ToolTurn>& turns,
                         GenerationRequest* out) {
  std::vector<std::string> tools;
  for (const ToolDef& t : request.tools) tools.push_back(ToolDefinition(t));
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ToolTurn& t = turns[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (t.role == "tool") {
      messages.push_back({"ipython", DumpJson(Json(t.text))});  // the template's tojson
    } else if (t.role == "assistant" && !t.calls.empty()) {
      if (t.calls.size() > 1) {
        return FieldError(field, "this model's template (Llama 3.1) takes one tool call per message");
      }
      KVMEM_ASSIGN_OR_RETURN(std::string call, CallText(t.calls[0], field));
      messages.push_back({"assistant", std::move(call)});
    } else {
      messages.push_back({t.role, t.text});
    }
  }
  if (messages.empty() || (messages.size() == 1 && messages[0].role == "system")) {
    return FieldError("messages", "tools need a message after the system one (Llama 3.1)");
  }
  out->messages = std::move(messages);
  out->template_tools = std::move(tools);
  if (request.choice.mode == ToolChoiceMode::kRequired ||
      request.choice.mode == ToolChoiceMode::kNamed) {
    KVMEM_ASSIGN_OR_RETURN(out->grammar, Llama31CallGrammar(request));
  }
  return Status::Ok();
}

}  // namespace kvmem::serve
