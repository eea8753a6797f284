// Parsing and validation of OpenAI request bodies (the accepted fields are listed in
// openai_api.h).
#include <string>

#include "engine/logprobs.h"
#include "serve/constrained_output.h"
#include "serve/openai_api.h"
#include "serve/openai_tools.h"
#include "serve/tool_reply.h"

namespace kvmem::serve {
namespace {

constexpr size_t kMaxStopStrings = 4;  // OpenAI's limit
constexpr int64_t kMaxChoices = 16;    // n: each choice is decoded in turn

// An integer in [lo, hi] or null/absent.
Result<std::optional<int64_t>> ReadIntIn(const Json& body, const char* key, int64_t lo,
                                         int64_t hi) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(body, key, key));
  if (v && (*v < lo || *v > hi)) {
    return FieldError(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "], got " + std::to_string(*v));
  }
  return v;
}

// The fields /v1/chat/completions and /v1/completions share. Fills `out` (all but the prompt
// or messages and the logprobs fields, which differ) and returns stream_options.include_usage.
// min_tokens: 0 where max_tokens 0 is allowed (completions' echo).
Result<bool> ParseCommon(const Json& body, const RequestContext& ctx, int min_tokens,
                         ParsedRequest* out) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> model, OptionalString(body, "model", "model"));
  (void)model;  // one model is loaded; any name is accepted

  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> n, ReadIntIn(body, "n", 1, kMaxChoices));
  out->generation.n = static_cast<int>(n.value_or(1));
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> best_of, OptionalInt(body, "best_of", "best_of"));
  if (best_of && *best_of != out->generation.n) {
    return FieldError("best_of", "only best_of == n is supported, got " + std::to_string(*best_of));
  }
  for (const char* key : {"functions", "logit_bias", "suffix"}) {
    KVMEM_RETURN_IF_ERROR(RejectIfRequested(body, key));
  }

  const int n_ctx = ctx.model.context_length;
  KVMEM_ASSIGN_OR_RETURN(std::optional<int> max_tokens,
                         ReadMaxTokens(body, "max_tokens", n_ctx, min_tokens));
  KVMEM_ASSIGN_OR_RETURN(std::optional<int> max_completion,
                         ReadMaxTokens(body, "max_completion_tokens", n_ctx, min_tokens));
  if (max_tokens && max_completion && *max_tokens != *max_completion) {
    return FieldError("max_completion_tokens", "disagrees with max_tokens");
  }
  out->generation.max_tokens = max_completion ? max_completion : max_tokens;

  KVMEM_ASSIGN_OR_RETURN(out->generation.sampling,
                         ReadSamplingParams(body, SamplingLimits{.max_temperature = 2.0}));
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    KVMEM_ASSIGN_OR_RETURN(std::optional<double> v, OptionalNumber(body, key, key));
    if (v && (*v < -2 || *v > 2)) return FieldError(key, "must be in [-2, 2]");
    if (!v) continue;
    SamplingParams& p = out->generation.sampling;
    (key[0] == 'p' ? p.presence_penalty : p.frequency_penalty) = static_cast<float>(*v);
  }
  KVMEM_ASSIGN_OR_RETURN(out->generation.stop, ReadStopStrings(body, "stop", kMaxStopStrings,
                                                               /*allow_single_string=*/true));

  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> stream, OptionalBool(body, "stream", "stream"));
  out->stream = stream.value_or(false);
  bool include_usage = false;
  if (const Json* options = FindField(body, "stream_options")) {
    if (!out->stream) return FieldError("stream_options", "only allowed when stream is true");
    if (!options->is_object()) return TypeError("stream_options", "an object", *options);
    KVMEM_ASSIGN_OR_RETURN(std::optional<bool> usage,
                           OptionalBool(*options, "include_usage", "stream_options.include_usage"));
    include_usage = usage.value_or(false);
  }

  KVMEM_ASSIGN_OR_RETURN(out->generation.retrieval_query, ReadRetrievalQuery(body));
  KVMEM_ASSIGN_OR_RETURN(out->generation.on_diverge, ReadOnDiverge(body));
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> user, OptionalString(body, "user", "user"));
  out->generation.agent.tenant = ctx.tenant;
  KVMEM_ASSIGN_OR_RETURN(out->generation.agent.id, ResolveAgentId(ctx, user, "user"));
  if (out->generation.n > 1 && !out->generation.agent.id.empty()) {
    return FieldError("n",
                      "n > 1 is only supported without an agent (no user / X-Agent-Id): "
                      "an agent's memory continues one reply");
  }
  return include_usage;
}

Result<ChatMessage> ParseChatMessage(const Json& m, const std::string& field) {
  if (!m.is_object()) return TypeError(field, "an object", m);
  KVMEM_ASSIGN_OR_RETURN(std::string role, RequiredString(m, "role", field + ".role"));
  if (role == "tool" || role == "function") {
    return Status(ErrorCode::kUnsupported,
                  "'" + field + ".role': '" + role + "' messages are not supported by kvmem");
  }
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant") {
    return FieldError(field + ".role",
                      "must be one of system, developer, user, assistant; got '" + role + "'");
  }
  KVMEM_RETURN_IF_ERROR(RejectIfRequested(m, "tool_calls"));
  KVMEM_RETURN_IF_ERROR(RejectIfRequested(m, "function_call"));
  const Json* content = FindField(m, "content");
  if (content == nullptr) return FieldError(field + ".content", "required");
  KVMEM_ASSIGN_OR_RETURN(std::string text, ReadTextContent(*content, field + ".content"));
  return ChatMessage{std::move(role), std::move(text)};
}

}  // namespace

Result<ParsedRequest> ParseChatCompletionRequest(std::string_view body_text,
                                                 const RequestContext& ctx) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ParsedRequest out;
  KVMEM_ASSIGN_OR_RETURN(bool include_usage, ParseCommon(body, ctx, 1, &out));

  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> logprobs, OptionalBool(body, "logprobs", "logprobs"));
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> top,
                         ReadIntIn(body, "top_logprobs", 0, engine::kMaxTopLogprobs));
  if (top && !logprobs.value_or(false)) {
    return FieldError("top_logprobs", "requires logprobs to be true");
  }
  if (logprobs.value_or(false)) out.generation.logprobs = static_cast<int>(top.value_or(0));
  KVMEM_RETURN_IF_ERROR(ReadConstrainedOutput(body, body_text, &out.generation));

  // Tools (serve/openai_tools.h): messages in the model's tool format, replies read back.
  const bool tools = UsesOpenAiTools(body);
  if (tools) {
    if (out.generation.n > 1 || out.generation.logprobs >= 0) {
      return FieldError(out.generation.n > 1 ? "n" : "logprobs", "not supported with tools");
    }
    KVMEM_RETURN_IF_ERROR(ReadOpenAiToolRequest(body, ctx.model.tool_format, &out.generation));
  } else {
    KVMEM_RETURN_IF_ERROR(ReadMessages(body, ParseChatMessage, &out.generation.messages));
  }

  ResponseMeta meta = NewResponseMeta("chatcmpl-", ctx.model.name);
  out.generation.request_id = meta.id;
  out.reply = MakeChatCompletionReply(
      std::move(meta), include_usage,
      {.n = out.generation.n, .logprobs = out.generation.logprobs >= 0, .echo = {}});
  if (tools) out.reply = MakeToolReply(std::move(out.reply), "call_", ctx.model.tool_format);
  return out;
}

Result<ParsedRequest> ParseCompletionRequest(std::string_view body_text,
                                             const RequestContext& ctx) {
  KVMEM_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ParsedRequest out;
  KVMEM_ASSIGN_OR_RETURN(std::optional<bool> echo_field, OptionalBool(body, "echo", "echo"));
  const bool echo = echo_field.value_or(false);
  KVMEM_ASSIGN_OR_RETURN(bool include_usage, ParseCommon(body, ctx, echo ? 0 : 1, &out));
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs,
                         ReadIntIn(body, "logprobs", 0, engine::kMaxTopLogprobs));
  if (logprobs) out.generation.logprobs = static_cast<int>(*logprobs);
  KVMEM_RETURN_IF_ERROR(ReadConstrainedOutput(body, body_text, &out.generation));
  // The prompt is scored when its logprobs are echoed, and when nothing is generated (max_tokens
  // 0: what else is there to do).
  const bool score_only = out.generation.max_tokens && *out.generation.max_tokens == 0;
  out.generation.prompt_logprobs = echo && (logprobs || score_only);
  if (out.generation.prompt_logprobs && !out.generation.agent.id.empty()) {
    return FieldError("echo",
                      "scoring the prompt (echo with logprobs or max_tokens 0) is only "
                      "supported without an agent (no user / X-Agent-Id)");
  }

  const Json* prompt = FindField(body, "prompt");
  if (prompt == nullptr) return FieldError("prompt", "required");
  if (prompt->is_array()) {
    if (prompt->size() != 1) {
      return FieldError("prompt",
                        "exactly one prompt is supported, got " + std::to_string(prompt->size()));
    }
    const Json& first = (*prompt)[0];
    if (!first.is_string()) {
      return Status(ErrorCode::kUnsupported, std::string("'prompt[0]': expected a string, got ") +
                                                 JsonTypeName(first) +
                                                 " (token-id prompts are not supported by kvmem)");
    }
    out.generation.prompt = first.get<std::string>();
  } else if (prompt->is_string()) {
    out.generation.prompt = prompt->get<std::string>();
  } else {
    return TypeError("prompt", "a string", *prompt);
  }

  ResponseMeta meta = NewResponseMeta("cmpl-", ctx.model.name);
  out.generation.request_id = meta.id;
  out.reply = MakeCompletionReply(std::move(meta), include_usage,
                                  {.n = out.generation.n,
                                   .logprobs = out.generation.logprobs >= 0,
                                   .echo = echo ? *out.generation.prompt : std::string()});
  return out;
}

}  // namespace kvmem::serve
