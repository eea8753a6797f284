#include "serve/anthropic_tools.h"

#include <string>
#include <vector>

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
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> type, OptionalString(t, "type", field + ".type"));
    if (type && *type != "custom") {
      return Status(ErrorCode::kUnsupported,
                    "'" + field + ".type': server tool '" + *type + "' is not supported by kvmem");
    }
    ToolDef def;
    KVMEM_ASSIGN_OR_RETURN(def.name, RequiredString(t, "name", field + ".name"));
    KVMEM_RETURN_IF_ERROR(ValidateToolName(def.name, field + ".name"));
    for (const ToolDef& other : tools) {
      if (other.name == def.name) return FieldError(field + ".name", "repeats '" + def.name + "'");
    }
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> description,
                           OptionalString(t, "description", field + ".description"));
    def.description = description.value_or("");
    def.field = field + ".input_schema";
    const Json* schema = FindField(t, "input_schema");
    if (schema == nullptr) return FieldError(def.field, "required");
    if (!schema->is_object()) return TypeError(def.field, "an object", *schema);
    def.parameters = *schema;
    tools.push_back(std::move(def));
  }
  return tools;
}

Status ReadToolChoice(const Json& body, ToolRequest* request) {
  const Json* v = FindField(body, "tool_choice");
  if (v == nullptr) return Status::Ok();
  if (!v->is_object()) return TypeError("tool_choice", "an object", *v);
  KVMEM_ASSIGN_OR_RETURN(std::string type, RequiredString(*v, "type", "tool_choice.type"));
  ToolChoice& choice = request->choice;
  if (type == "auto") {
    choice.mode = ToolChoiceMode::kAuto;
  } else if (type == "any") {
    choice.mode = ToolChoiceMode::kRequired;
  } else if (type == "none") {
    choice.mode = ToolChoiceMode::kNone;
  } else if (type == "tool") {
    choice.mode = ToolChoiceMode::kNamed;
    KVMEM_ASSIGN_OR_RETURN(choice.name, RequiredString(*v, "name", "tool_choice.name"));
    bool known = false;
    for (const ToolDef& t : request->tools) known = known || t.name == choice.name;
    if (!known) return FieldError("tool_choice.name", "no tool is named '" + choice.name + "'");
  } else {
    return FieldError("tool_choice.type", "must be auto, any, tool or none, got '" + type + "'");
  }
  if (choice.mode == ToolChoiceMode::kRequired && request->tools.empty()) {
    return FieldError("tool_choice", "'any' needs tools");
  }
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> single,
                         OptionalBool(*v, "disable_parallel_tool_use",
                                      "tool_choice.disable_parallel_tool_use"));
  request->parallel = !single.value_or(false);
  return Status::Ok();
}

// One message's blocks as turns: an assistant's text and calls form one turn; a user's
// tool_result blocks are tool turns, its text one user turn after them.
Status ReadMessage(const Json& m, const std::string& field, std::vector<ToolTurn>* turns) {
  if (!m.is_object()) return TypeError(field, "an object", m);
  KVMEM_ASSIGN_OR_RETURN(std::string role, RequiredString(m, "role", field + ".role"));
  if (role != "user" && role != "assistant") {
    return FieldError(field + ".role", "must be user or assistant, got '" + role + "'");
  }
  const Json* content = FindField(m, "content");
  if (content == nullptr) return FieldError(field + ".content", "required");
  ToolTurn turn{.role = role};
  if (content->is_string()) {
    turn.text = content->get<std::string>();
    turns->push_back(std::move(turn));
    return Status::Ok();
  }
  if (!content->is_array()) return TypeError(field + ".content", "a string or an array", *content);
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string f = field + ".content[" + std::to_string(i) + "]";
    const Json& block = (*content)[i];
    if (!block.is_object()) return TypeError(f, "an object", block);
    KVMEM_ASSIGN_OR_RETURN(std::string type, RequiredString(block, "type", f + ".type"));
    if (type == "text") {
      KVMEM_ASSIGN_OR_RETURN(std::string text, RequiredString(block, "text", f + ".text"));
      if (!turn.text.empty()) turn.text += "\n";
      turn.text += text;
    } else if (type == "tool_use" && role == "assistant") {
      ToolCall call;
      KVMEM_ASSIGN_OR_RETURN(call.id, RequiredString(block, "id", f + ".id"));
      KVMEM_ASSIGN_OR_RETURN(call.name, RequiredString(block, "name", f + ".name"));
      const Json* input = FindField(block, "input");
      if (input != nullptr && !input->is_object()) return TypeError(f + ".input", "an object", *input);
      // Keys in name order, compact: how the model wrote them (serve/tool_calls.h).
      call.arguments = input != nullptr ? DumpJson(*input) : "{}";
      turn.calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      ToolTurn result{.role = "tool"};
      KVMEM_ASSIGN_OR_RETURN(result.tool_call_id,
                             RequiredString(block, "tool_use_id", f + ".tool_use_id"));
      if (const Json* c = FindField(block, "content")) {
        KVMEM_ASSIGN_OR_RETURN(result.text, ReadTextContent(*c, f + ".content"));
      }
      KVMEM_ASSIGN_OR_RETURN(std::optional<bool> is_error,
                             OptionalBool(block, "is_error", f + ".is_error"));
      result.is_error = is_error.value_or(false);
      turns->push_back(std::move(result));
    } else {
      return Status(ErrorCode::kUnsupported, "'" + f + ".type': content of type '" + type +
                                                 "' in a " + role +
                                                 " message is not supported by kvmem");
    }
  }
  if (role == "assistant" || !turn.text.empty()) turns->push_back(std::move(turn));
  return Status::Ok();
}

}  // namespace

bool UsesAnthropicTools(const Json& body) {
  const Json* tools = FindField(body, "tools");
  if (tools != nullptr && !(tools->is_array() && tools->empty())) return true;
  const Json* messages = FindField(body, "messages");
  if (messages == nullptr || !messages->is_array()) return false;
  for (const Json& m : *messages) {
    const Json* content = m.is_object() ? FindField(m, "content") : nullptr;
    if (content == nullptr || !content->is_array()) continue;
    for (const Json& block : *content) {
      const Json* type = block.is_object() ? FindField(block, "type") : nullptr;
      if (type != nullptr && type->is_string() &&
          (type->get<std::string>() == "tool_use" || type->get<std::string>() == "tool_result")) {
        return true;
      }
    }
  }
  return false;
}

Status ReadAnthropicToolRequest(const Json& body, ToolFormat format, GenerationRequest* out) {
  ToolRequest request;
  KVMEM_ASSIGN_OR_RETURN(request.tools, ReadTools(body));
  KVMEM_RETURN_IF_ERROR(ReadToolChoice(body, &request));
  const Json* messages = FindField(body, "messages");
  if (messages == nullptr) return FieldError("messages", "required");
  if (!messages->is_array()) return TypeError("messages", "an array", *messages);
  if (messages->empty()) return FieldError("messages", "must not be empty");
  std::vector<ToolTurn> turns;
  for (const ChatMessage& m : out->messages) turns.push_back({.role = m.role, .text = m.content});
  for (size_t i = 0; i < messages->size(); ++i) {
    KVMEM_RETURN_IF_ERROR(ReadMessage((*messages)[i], "messages[" + std::to_string(i) + "]", &turns));
  }
  if (turns.back().role == "assistant") {
    return FieldError("messages", "a final assistant message (prefill) cannot be combined with tools");
  }
  return ApplyTools(format, request, turns, out);
}

}  // namespace kvmem::serve
