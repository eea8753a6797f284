// Parsing and validation of POST /v1/responses bodies (the accepted fields are listed in
// responses_api.h), and the stored record's shape.
#include <string>
#include <utility>

#include "serve/constrained_output.h"
#include "serve/openai_tools.h"
#include "serve/responses_api.h"
#include "serve/tool_reply.h"

namespace kvmem::serve {
namespace {

using OrderedJson = nlohmann::ordered_json;

// A message item as a chat message {role, content}.
Result<Json> ReadMessageItem(const Json& item, const std::string& field) {
  KVMEM_ASSIGN_OR_RETURN(std::string role, RequiredString(item, "role", field + ".role"));
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant") {
    return FieldError(field + ".role",
                      "must be one of user, system, developer, assistant; got '" + role + "'");
  }
  const Json* content = FindField(item, "content");
  if (content == nullptr) return FieldError(field + ".content", "required");
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadTextContent(*content, field + ".content",
                                                           {"input_text", "output_text", "text"}));
  return Json{{"role", std::move(role)}, {"content", std::move(text)}};
}

// Appends input item `item` to `chat` as chat-completions messages (serve/openai_tools.h): a
// message as it is, a function_call into the tool_calls of the assistant message it follows
// (a reply's text and calls are one chat message), a function_call_output as a "tool" message.
Status AppendInputItem(const Json& item, const std::string& field, Json* chat) {
  if (!item.is_object()) return TypeError(field, "an object", item);
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> type,
                         OptionalString(item, "type", field + ".type"));
  if (!type || *type == "message") {
    KVMEM_ASSIGN_OR_RETURN(Json m, ReadMessageItem(item, field));
    chat->push_back(std::move(m));
    return Status::Ok();
  }
  if (*type == "function_call") {
    KVMEM_ASSIGN_OR_RETURN(std::string id, RequiredString(item, "call_id", field + ".call_id"));
    KVMEM_ASSIGN_OR_RETURN(std::string name, RequiredString(item, "name", field + ".name"));
    KVMEM_ASSIGN_OR_RETURN(std::string args,
                           RequiredString(item, "arguments", field + ".arguments"));
    const Json call = {{"id", std::move(id)},
                       {"type", "function"},
                       {"function", {{"name", std::move(name)}, {"arguments", std::move(args)}}}};
    if (chat->empty() || chat->back()["role"] != "assistant") {
      chat->push_back({{"role", "assistant"}, {"content", nullptr}});
    }
    Json& reply = chat->back();  // the assistant's text and calls are one chat message
    if (!reply.contains("tool_calls")) reply["tool_calls"] = Json::array();
    reply["tool_calls"].push_back(call);
    return Status::Ok();
  }
  if (*type == "function_call_output") {
    KVMEM_ASSIGN_OR_RETURN(std::string id, RequiredString(item, "call_id", field + ".call_id"));
    const Json* output = FindField(item, "output");
    if (output == nullptr) return FieldError(field + ".output", "required");
    KVMEM_ASSIGN_OR_RETURN(std::string text,
                           ReadTextContent(*output, field + ".output", {"input_text", "text"}));
    chat->push_back({{"role", "tool"}, {"tool_call_id", std::move(id)}, {"content", text}});
    return Status::Ok();
  }
  return Unsupported("'" + field + ".type': input items of type '" + *type +
                     "' are not supported by kvmem (message, function_call, "
                     "function_call_output)");
}

// `input`: one user message, or a non-empty array of items, as chat messages.
Result<Json> ReadInput(const Json& body) {
  const Json* input = FindField(body, "input");
  if (input == nullptr) return FieldError("input", "required");
  if (input->is_string()) return Json::array({{{"role", "user"}, {"content", *input}}});
  if (!input->is_array()) return TypeError("input", "a string or an array of items", *input);
  if (input->empty()) return FieldError("input", "must not be empty");
  Json chat = Json::array();
  for (size_t i = 0; i < input->size(); ++i) {
    KVMEM_RETURN_IF_ERROR(AppendInputItem((*input)[i], "input[" + std::to_string(i) + "]", &chat));
  }
  return chat;
}

// Function tools {type: "function", name, description, parameters, strict} and tool_choice
// {type: "function", name} in chat completions' spelling (serve/openai_tools.h), into `chat`.
Status ReadTools(const Json& body, Json* chat) {
  if (const Json* tools = FindField(body, "tools"); tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return TypeError("tools", "an array", *tools);
    Json list = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string field = "tools[" + std::to_string(i) + "]";
      const Json& tool = (*tools)[i];
      if (!tool.is_object()) return TypeError(field, "an object", tool);
      KVMEM_ASSIGN_OR_RETURN(std::string type, RequiredString(tool, "type", field + ".type"));
      if (type != "function") {
        return Unsupported("'" + field + ".type': tools of type '" + type +
                           "' are not supported by kvmem (function only)");
      }
      Json function = tool;
      function.erase("type");
      list.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    if (!list.empty()) (*chat)["tools"] = std::move(list);
  }
  if (const Json* choice = FindField(body, "tool_choice"); choice != nullptr) {
    Json c = *choice;
    const Json* type = c.is_object() ? FindField(c, "type") : nullptr;
    if (type != nullptr && *type == "function" && c.contains("name")) {
      c = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    }
    (*chat)["tool_choice"] = std::move(c);
  }
  if (const Json* parallel = FindField(body, "parallel_tool_calls"); parallel != nullptr) {
    (*chat)["parallel_tool_calls"] = *parallel;
  }
  return Status::Ok();
}

// A Status about chat's response_format, renamed to the Responses API's text.format.
Status AsTextFormatError(const Status& status) {
  std::string m = status.message();
  for (std::string_view from : {"response_format.json_schema", "response_format"}) {
    if (const size_t at = m.find(from); at != std::string::npos) {
      m.replace(at, from.size(), "text.format");
      break;
    }
  }
  return Status(status.code(), std::move(m));
}

// text.format as chat's response_format (serve/constrained_output.h), which compiles it into
// out->grammar. The schema is re-read from `body_text` in its own key order. Returns the echo
// of `text` for the response object.
Result<Json> ReadTextFormat(const Json& body, std::string_view body_text, GenerationRequest* out) {
  const Json* text = FindField(body, "text");
  Json echo = {{"format", {{"type", "text"}}}};
  if (text == nullptr) return echo;
  if (!text->is_object()) return TypeError("text", "an object", *text);
  const Json* format = FindField(*text, "format");
  if (format == nullptr) return echo;
  if (!format->is_object()) return TypeError("text.format", "an object", *format);
  KVMEM_ASSIGN_OR_RETURN(std::string type, RequiredString(*format, "type", "text.format.type"));
  echo["format"] = *format;
  if (type == "text") return echo;
  OrderedJson response_format = {{"type", type}};
  if (type == "json_schema") {
    const OrderedJson ordered = OrderedJson::parse(body_text)["text"]["format"];
    OrderedJson schema_spec = OrderedJson::object();
    for (const char* key : {"name", "schema", "strict", "description"}) {
      if (ordered.contains(key)) schema_spec[key] = ordered[key];
    }
    response_format["json_schema"] = std::move(schema_spec);
  }
  const std::string chat_text = OrderedJson{{"response_format", response_format}}.dump();
  Status read = ReadConstrainedOutput(Json::parse(chat_text), chat_text, out);
  if (!read.ok()) return AsTextFormatError(read);
  return echo;
}

// The previous response's agent and conversation; NotFound naming previous_response_id.
Status ReadPrevious(Backend& backend, const std::string& tenant, const std::string& id,
                    std::string* agent, Json* conversation) {
  Result<Json> record = backend.GetResponse(tenant, id);
  if (!record.ok() && record.status().code() == ErrorCode::kNotFound) {
    return NotFound("'previous_response_id': no stored response '" + id + "'");
  }
  KVMEM_RETURN_IF_ERROR(record.status());
  KVMEM_ASSIGN_OR_RETURN(*conversation, RecordMessages(*record));
  const Json* a = FindField(*record, "agent");
  if (a == nullptr || !a->is_string()) return Corrupt("stored response '" + id + "' has no agent");
  *agent = a->get<std::string>();
  return Status::Ok();
}

Result<Json> ReadMetadata(const Json& body) {
  const Json* metadata = FindField(body, "metadata");
  if (metadata == nullptr || metadata->is_null()) return Json::object();
  if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
  for (const auto& [key, value] : metadata->items()) {
    if (!value.is_string()) return TypeError("metadata." + key, "a string", value);
  }
  return *metadata;
}

Json OrNull(const std::optional<std::string>& v) { return v ? Json(*v) : Json(); }

}  // namespace

Json ResponseRecord(const Json& response, const std::string& agent, const Json& messages) {
  return {{"response", response}, {"agent", agent}, {"messages", messages}};
}

Result<Json> RecordMessages(const Json& record) {
  const Json* list = FindField(record, "messages");
  if (list == nullptr || !list->is_array()) return Corrupt("stored response has no messages");
  for (const Json& m : *list) {
    if (!m.is_object() || !m.contains("role")) {
      return Corrupt("stored response has a malformed message");
    }
  }
  return *list;
}

Result<ParsedRequest> ParseResponsesRequest(std::string_view body_text, const RequestContext& ctx,
                                            Backend& backend) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ParsedRequest out;
  out.prompt_field = "input";
  GenerationRequest& g = out.generation;
  for (const char* key : {"background", "conversation", "prompt"}) {
    KVMEM_RETURN_IF_ERROR(RejectIfRequested(body, key));
  }
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(body, "model", "model"));
  (void)model;  // one model is loaded; any name is accepted
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                         OptionalString(body, "instructions", "instructions"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> previous,
                         OptionalString(body, "previous_response_id", "previous_response_id"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> store, OptionalBool(body, "store", "store"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> stream, OptionalBool(body, "stream", "stream"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> parallel,
                         OptionalBool(body, "parallel_tool_calls", "parallel_tool_calls"));
  out.stream = stream.value_or(false);
  KVMEM_ASSIGN_OR_RETURN(g.max_tokens,
                         ReadMaxTokens(body, "max_output_tokens", ctx.model.context_length));
  KVMEM_ASSIGN_OR_RETURN(g.sampling,
                         ReadSamplingParams(body, SamplingLimits{.max_temperature = 2.0}));
  KVMEM_ASSIGN_OR_RETURN(Json metadata, ReadMetadata(body));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> user, OptionalString(body, "user", "user"));
  KVMEM_ASSIGN_OR_RETURN(Json text, ReadTextFormat(body, body_text, &g));
  KVMEM_ASSIGN_OR_RETURN(g.retrieval_query, ReadRetrievalQuery(body));
  KVMEM_ASSIGN_OR_RETURN(g.on_diverge, ReadOnDiverge(body));
  KVMEM_ASSIGN_OR_RETURN(Json input, ReadInput(body));

  // The conversation as a chat completions body: instructions, the previous response's
  // conversation, the new items; with the tools, read as chat reads them.
  ResponseStorage storage;
  if (previous) {
    KVMEM_RETURN_IF_ERROR(
        ReadPrevious(backend, ctx.tenant, *previous, &storage.agent, &storage.conversation));
  }
  storage.conversation.insert(storage.conversation.end(), input.begin(), input.end());
  Json chat = {{"messages", Json::array()}};
  if (instructions) chat["messages"].push_back({{"role", "system"}, {"content", *instructions}});
  chat["messages"].insert(chat["messages"].end(), storage.conversation.begin(),
                          storage.conversation.end());
  KVMEM_RETURN_IF_ERROR(ReadTools(body, &chat));
  const bool tools = UsesOpenAiTools(chat);
  if (tools) {
    if (g.grammar) return FieldError("text.format", "not supported with tools");
    KVMEM_RETURN_IF_ERROR(ReadOpenAiToolRequest(chat, ctx.model.tool_format, &g));
  } else {
    for (const Json& m : chat["messages"]) {
      const Json* role = FindField(m, "role");
      const Json* content = FindField(m, "content");
      if (role == nullptr || content == nullptr || !role->is_string() || !content->is_string()) {
        return Corrupt("stored response '" + previous.value_or("") + "': malformed message");
      }
      g.messages.push_back({role->get<std::string>(), content->get<std::string>()});
    }
  }

  ResponseMeta meta = NewResponseMeta("resp_", ctx.model.name);
  g.request_id = meta.id;
  g.agent.tenant = ctx.tenant;
  if (store.value_or(true)) {
    if (storage.agent.empty()) storage.agent = meta.id;  // a new chain: its first response
    g.agent.id = storage.agent;
    storage.backend = &backend;
    storage.tenant = ctx.tenant;
  } else {
    storage.agent.clear();  // anonymous: nothing of this turn is kept
  }

  const SamplingParams& s = g.sampling;
  Json echo = {
      {"instructions", OrNull(instructions)},
      {"previous_response_id", OrNull(previous)},
      {"store", store.value_or(true)},
      {"temperature", s.temperature ? Json(*s.temperature) : Json()},
      {"top_p", s.top_p ? Json(*s.top_p) : Json()},
      {"max_output_tokens", g.max_tokens ? Json(*g.max_tokens) : Json()},
      {"metadata", std::move(metadata)},
      {"text", std::move(text)},
      {"tools", body.contains("tools") && body["tools"].is_array() ? body["tools"] : Json::array()},
      {"tool_choice", body.contains("tool_choice") ? body["tool_choice"] : Json("auto")},
      {"parallel_tool_calls", parallel.value_or(true)},
      {"truncation", "disabled"},
      {"user", OrNull(user)},
  };
  out.reply = MakeResponsesReply(std::move(meta), std::move(echo), std::move(storage));
  if (tools) out.reply = MakeToolReply(std::move(out.reply), "call_", ctx.model.tool_format);
  return out;
}

}  // namespace kvmem::serve
