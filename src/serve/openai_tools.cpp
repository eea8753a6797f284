#include "serve/openai_tools.h"

#include <string>

#include "serve/request_fields.h"
#include "serve/tool_calls.h"

namespace kvmem::serve {
namespace {

Result<std::vector<ToolDef>> ReadTools(const Json& body) {
  std::vector<ToolDef> tools;
  const Json* list = FindField(body, "tools");
  if (list == nullptr) return tools;
  if (!list->is_array()) return TypeError("tools", "an array", *list);
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string field = "tools[" + std::to_string(i) + "]";
    const Json& t = (*list)[i];
    if (!t.is_object()) return TypeError(field, "an object", t);
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> type,
                           OptionalString(t, "type", field + ".type"));
    if (type && *type != "function") {
      return FieldError(field + ".type", "only \"function\" tools are supported, got '" + *type + "'");
    }
    const Json* fn = FindField(t, "function");
    if (fn == nullptr) return FieldError(field + ".function", "required");
    if (!fn->is_object()) return TypeError(field + ".function", "an object", *fn);
    ToolDef def;
    KVMEM_ASSIGN_OR_RETURN(def.name, RequiredString(*fn, "name", field + ".function.name"));
    KVMEM_RETURN_IF_ERROR(ValidateToolName(def.name, field + ".function.name"));
    for (const ToolDef& other : tools) {
      if (other.name == def.name) return FieldError(field + ".function.name", "repeats '" + def.name + "'");
    }
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> description,
                           OptionalString(*fn, "description", field + ".function.description"));
    def.description = description.value_or("");
    def.field = field + ".function.parameters";
    if (const Json* params = FindField(*fn, "parameters")) {
      if (!params->is_object()) return TypeError(def.field, "an object", *params);
      def.parameters = *params;
    }
    KVMEM_ASSIGN_OR_RETURN(std::optional<bool> strict,
                           OptionalBool(*fn, "strict", field + ".function.strict"));
    def.strict = strict.value_or(false);
    tools.push_back(std::move(def));
  }
  return tools;
}

Result<ToolChoice> ReadToolChoice(const Json& body, const std::vector<ToolDef>& tools) {
  ToolChoice choice;
  const Json* v = FindField(body, "tool_choice");
  if (v == nullptr) return choice;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") {
      choice.mode = ToolChoiceMode::kAuto;
    } else if (s == "none") {
      choice.mode = ToolChoiceMode::kNone;
    } else if (s == "required") {
      choice.mode = ToolChoiceMode::kRequired;
    } else {
      return FieldError("tool_choice", "must be auto, none, required or a function, got '" + s + "'");
    }
  } else if (v->is_object()) {
    const Json* fn = FindField(*v, "function");
    if (fn == nullptr || !fn->is_object()) return FieldError("tool_choice.function", "required");
    KVMEM_ASSIGN_OR_RETURN(choice.name, RequiredString(*fn, "name", "tool_choice.function.name"));
    choice.mode = ToolChoiceMode::kNamed;
    bool known = false;
    for (const ToolDef& t : tools) known = known || t.name == choice.name;
    if (!known) return FieldError("tool_choice.function.name", "no tool is named '" + choice.name + "'");
  } else {
    return TypeError("tool_choice", "a string or an object", *v);
  }
  if (tools.empty() && choice.mode == ToolChoiceMode::kRequired) {
    return FieldError("tool_choice", "'required' needs tools");
  }
  return choice;
}

Result<std::vector<ToolCall>> ReadCalls(const Json& m, const std::string& field) {
  std::vector<ToolCall> calls;
  const Json* list = FindField(m, "tool_calls");
  if (list == nullptr) return calls;
  if (!list->is_array()) return TypeError(field, "an array", *list);
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    const Json& c = (*list)[i];
    if (!c.is_object()) return TypeError(f, "an object", c);
    ToolCall call;
    KVMEM_ASSIGN_OR_RETURN(call.id, RequiredString(c, "id", f + ".id"));
    const Json* fn = FindField(c, "function");
    if (fn == nullptr || !fn->is_object()) return FieldError(f + ".function", "required");
    KVMEM_ASSIGN_OR_RETURN(call.name, RequiredString(*fn, "name", f + ".function.name"));
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> args,
                           OptionalString(*fn, "arguments", f + ".function.arguments"));
    call.arguments = args.value_or("{}");
    calls.push_back(std::move(call));
  }
  return calls;
}

Result<ToolTurn> ReadTurn(const Json& m, const std::string& field) {
  if (!m.is_object()) return TypeError(field, "an object", m);
  ToolTurn turn;
  KVMEM_ASSIGN_OR_RETURN(turn.role, RequiredString(m, "role", field + ".role"));
  if (turn.role == "developer") turn.role = "system";
  if (turn.role != "system" && turn.role != "user" && turn.role != "assistant" &&
      turn.role != "tool") {
    return FieldError(field + ".role",
                      "must be one of system, developer, user, assistant, tool; got '" + turn.role + "'");
  }
  KVMEM_RETURN_IF_ERROR(RejectIfRequested(m, "function_call"));
  if (turn.role == "assistant") {
    KVMEM_ASSIGN_OR_RETURN(turn.calls, ReadCalls(m, field + ".tool_calls"));
  } else if (FindField(m, "tool_calls") != nullptr) {
    return FieldError(field + ".tool_calls", "only assistant messages make tool calls");
  }
  if (turn.role == "tool") {
    KVMEM_ASSIGN_OR_RETURN(turn.tool_call_id,
                           RequiredString(m, "tool_call_id", field + ".tool_call_id"));
  }
  const Json* content = FindField(m, "content");
  if (content == nullptr) {
    if (turn.calls.empty()) return FieldError(field + ".content", "required");
  } else {
    KVMEM_ASSIGN_OR_RETURN(turn.text, ReadTextContent(*content, field + ".content"));
  }
  return turn;
}

}  // namespace

bool UsesOpenAiTools(const Json& body) {
  const Json* tools = FindField(body, "tools");
  if (tools != nullptr && !(tools->is_array() && tools->empty())) return true;
  if (FindField(body, "tool_choice") != nullptr) return true;
  const Json* messages = FindField(body, "messages");
  if (messages == nullptr || !messages->is_array()) return false;
  for (const Json& m : *messages) {
    if (!m.is_object()) continue;
    const Json* role = FindField(m, "role");
    if (role != nullptr && role->is_string() && role->get<std::string>() == "tool") return true;
    if (FindField(m, "tool_calls") != nullptr) return true;
  }
  return false;
}

Status ReadOpenAiToolRequest(const Json& body, ToolFormat format, GenerationRequest* out) {
  ToolRequest request;
  KVMEM_ASSIGN_OR_RETURN(request.tools, ReadTools(body));
  KVMEM_ASSIGN_OR_RETURN(request.choice, ReadToolChoice(body, request.tools));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> parallel,
                         OptionalBool(body, "parallel_tool_calls", "parallel_tool_calls"));
  request.parallel = parallel.value_or(true);

  const Json* messages = FindField(body, "messages");
  if (messages == nullptr) return FieldError("messages", "required");
  if (!messages->is_array()) return TypeError("messages", "an array", *messages);
  if (messages->empty()) return FieldError("messages", "must not be empty");
  std::vector<ToolTurn> turns;
  for (size_t i = 0; i < messages->size(); ++i) {
    KVMEM_ASSIGN_OR_RETURN(ToolTurn t, ReadTurn((*messages)[i], "messages[" + std::to_string(i) + "]"));
    turns.push_back(std::move(t));
  }
  return ApplyTools(format, request, turns, out);
}

Json OpenAiToolCalls(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

Json OpenAiToolCallDelta(int index, const ToolCall* call, std::string_view arguments) {
  if (call == nullptr) return {{"index", index}, {"function", {{"arguments", arguments}}}};
  return {{"index", index},
          {"id", call->id},
          {"type", "function"},
          {"function", {{"name", call->name}, {"arguments", arguments}}}};
}

}  // namespace kvmem::serve
