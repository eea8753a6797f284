// Parsing and validation of Anthropic /v1/messages bodies (the accepted fields are listed in
// anthropic_api.h).
#include <string>

#include "serve/anthropic_api.h"
#include "serve/anthropic_tools.h"
#include "serve/tool_reply.h"

namespace kvmem::serve {
namespace {

// Anthropic documents no small limit; this one only bounds the stop matcher's work.
constexpr size_t kMaxStopSequences = 16;

Result<ChatMessage> ParseMessage(const Json& m, const std::string& field) {
  if (!m.is_object()) return TypeError(field, "an object", m);
  KVMEM_ASSIGN_OR_RETURN(std::string role, RequiredString(m, "role", field + ".role"));
  if (role != "user" && role != "assistant") {
    return FieldError(field + ".role", "must be user or assistant, got '" + role + "'");
  }
  const Json* content = FindField(m, "content");
  if (content == nullptr) return FieldError(field + ".content", "required");
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadTextContent(*content, field + ".content"));
  return ChatMessage{std::move(role), std::move(text)};
}

Status CheckUnsupported(const Json& body) {
  if (const Json* thinking = FindField(body, "thinking")) {
    if (!thinking->is_object()) return TypeError("thinking", "an object", *thinking);
    KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> type,
                           OptionalString(*thinking, "type", "thinking.type"));
    if (type && *type != "disabled") {
      return Status(ErrorCode::kUnsupported, "'thinking': not supported by kvmem");
    }
  }
  return Status::Ok();
}

// system, messages and tools: what /v1/messages and count_tokens both render into the prompt.
// Returns whether the request uses tools.
Result<bool> ReadPrompt(const Json& body, const RequestContext& ctx, GenerationRequest* g) {
  if (const Json* system = FindField(body, "system")) {
    KVMEM_ASSIGN_OR_RETURN(std::string text, ReadTextContent(*system, "system"));
    g->messages.push_back(ChatMessage{"system", std::move(text)});
  }
  // Tools (serve/anthropic_tools.h): messages in the generic tool format, replies read back.
  const bool tools = UsesAnthropicTools(body);
  if (tools) {
    KVMEM_RETURN_IF_ERROR(ReadAnthropicToolRequest(body, ctx.model.tool_format, g));
  } else {
    KVMEM_RETURN_IF_ERROR(ReadMessages(body, ParseMessage, &g->messages));
    g->continue_final_message = g->messages.back().role == "assistant";
  }
  return tools;
}

}  // namespace

Result<GenerationRequest> ParseCountTokensRequest(std::string_view body_text,
                                                  const RequestContext& ctx) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(body, "model", "model"));
  (void)model;
  KVMEM_RETURN_IF_ERROR(CheckUnsupported(body));
  GenerationRequest g;
  g.agent.tenant = ctx.tenant;
  KVMEM_RETURN_IF_ERROR(ReadPrompt(body, ctx, &g).status());
  return g;
}

std::string CountTokensJson(int64_t input_tokens) {
  return DumpJson({{"input_tokens", input_tokens}});
}

Result<ParsedRequest> ParseMessagesRequest(std::string_view body_text, const RequestContext& ctx) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ParsedRequest out;
  GenerationRequest& g = out.generation;

  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(body, "model", "model"));
  (void)model;  // one model is loaded; any name is accepted
  KVMEM_RETURN_IF_ERROR(CheckUnsupported(body));

  KVMEM_ASSIGN_OR_RETURN(g.max_tokens, ReadMaxTokens(body, "max_tokens", ctx.model.context_length));
  if (!g.max_tokens) return FieldError("max_tokens", "required");
  KVMEM_ASSIGN_OR_RETURN(g.sampling,
                         ReadSamplingParams(body, SamplingLimits{.max_temperature = 1.0}));
  KVMEM_ASSIGN_OR_RETURN(g.stop, ReadStopStrings(body, "stop_sequences", kMaxStopSequences,
                                                 /*allow_single_string=*/false));
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> stream, OptionalBool(body, "stream", "stream"));
  out.stream = stream.value_or(false);
  KVMEM_ASSIGN_OR_RETURN(g.retrieval_query, ReadRetrievalQuery(body));
  KVMEM_ASSIGN_OR_RETURN(g.on_diverge, ReadOnDiverge(body));

  std::optional<std::string> user_id;
  if (const Json* metadata = FindField(body, "metadata")) {
    if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
    KVMEM_ASSIGN_OR_RETURN(user_id, OptionalString(*metadata, "user_id", "metadata.user_id"));
  }
  g.agent.tenant = ctx.tenant;
  KVMEM_ASSIGN_OR_RETURN(g.agent.id, ResolveAgentId(ctx, user_id, "metadata.user_id"));

  KVMEM_ASSIGN_OR_RETURN(const bool tools, ReadPrompt(body, ctx, &g));

  ResponseMeta meta = NewResponseMeta("msg_", ctx.model.name);
  g.request_id = meta.id;
  out.reply = MakeMessagesReply(std::move(meta), tools);
  if (tools) out.reply = MakeToolReply(std::move(out.reply), "toolu_", ctx.model.tool_format);
  return out;
}

}  // namespace kvmem::serve
