// Parsing and validation of POST /v1/responses bodies (the accepted fields are listed in
// responses_api.h), and the stored record's shape.
#include <string>
#include <utility>

#include "serve/constrained_output.h"
#include "serve/responses_api.h"

namespace kvmem::serve {
namespace {

using OrderedJson = nlohmann::ordered_json;

Result<ChatMessage> ParseInputItem(const Json& item, const std::string& field) {
  if (!item.is_object()) return TypeError(field, "an object", item);
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> type,
                         OptionalString(item, "type", field + ".type"));
  if (type && *type != "message") {
    return Unsupported("'" + field + ".type': input items of type '" + *type +
                       "' are not supported by kvmem (messages only)");
  }
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
  return ChatMessage{std::move(role), std::move(text)};
}

// `input`: one user message, or a non-empty array of messages.
Result<std::vector<ChatMessage>> ReadInput(const Json& body) {
  const Json* input = FindField(body, "input");
  if (input == nullptr) return FieldError("input", "required");
  if (input->is_string()) return std::vector<ChatMessage>{{"user", input->get<std::string>()}};
  if (!input->is_array()) return TypeError("input", "a string or an array of items", *input);
  if (input->empty()) return FieldError("input", "must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < input->size(); ++i) {
    KVMEM_ASSIGN_OR_RETURN(ChatMessage m,
                           ParseInputItem((*input)[i], "input[" + std::to_string(i) + "]"));
    out.push_back(std::move(m));
  }
  return out;
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
                    std::string* agent, std::vector<ChatMessage>* conversation) {
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

Json ResponseRecord(const Json& response, const std::string& agent,
                    const std::vector<ChatMessage>& messages) {
  Json list = Json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return {{"response", response}, {"agent", agent}, {"messages", std::move(list)}};
}

Result<std::vector<ChatMessage>> RecordMessages(const Json& record) {
  const Json* list = FindField(record, "messages");
  if (list == nullptr || !list->is_array()) return Corrupt("stored response has no messages");
  std::vector<ChatMessage> out;
  for (const Json& m : *list) {
    const Json* role = m.is_object() ? FindField(m, "role") : nullptr;
    const Json* content = m.is_object() ? FindField(m, "content") : nullptr;
    if (role == nullptr || content == nullptr || !role->is_string() || !content->is_string()) {
      return Corrupt("stored response has a malformed message");
    }
    out.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return out;
}

Result<ParsedRequest> ParseResponsesRequest(std::string_view body_text, const RequestContext& ctx,
                                            Backend& backend) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ParsedRequest out;
  out.prompt_field = "input";
  GenerationRequest& g = out.generation;
  for (const char* key : {"tools", "background", "conversation", "prompt"}) {
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
  out.stream = stream.value_or(false);
  KVMEM_ASSIGN_OR_RETURN(g.max_tokens,
                         ReadMaxTokens(body, "max_output_tokens", ctx.model.context_length));
  KVMEM_ASSIGN_OR_RETURN(g.sampling,
                         ReadSamplingParams(body, SamplingLimits{.max_temperature = 2.0}));
  KVMEM_ASSIGN_OR_RETURN(Json metadata, ReadMetadata(body));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> user, OptionalString(body, "user", "user"));
  KVMEM_ASSIGN_OR_RETURN(Json text, ReadTextFormat(body, body_text, &g));
  KVMEM_ASSIGN_OR_RETURN(g.retrieval_query, ReadRetrievalQuery(body));
  KVMEM_ASSIGN_OR_RETURN(std::vector<ChatMessage> input, ReadInput(body));

  ResponseStorage storage;
  if (previous) {
    KVMEM_RETURN_IF_ERROR(
        ReadPrevious(backend, ctx.tenant, *previous, &storage.agent, &storage.conversation));
  }
  storage.conversation.insert(storage.conversation.end(), input.begin(), input.end());
  if (instructions) g.messages.push_back({"system", *instructions});
  g.messages.insert(g.messages.end(), storage.conversation.begin(), storage.conversation.end());

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
      {"tools", Json::array()},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", true},
      {"truncation", "disabled"},
      {"user", OrNull(user)},
  };
  out.reply = MakeResponsesReply(std::move(meta), std::move(echo), std::move(storage));
  return out;
}

}  // namespace kvmem::serve
