// Validation shared by the OpenAI and Anthropic request parsers: the agent a request belongs
// to, the token budget, sampling settings, stop strings and text content. Each check names
// the offending field in its InvalidArgument message; the dialects differ only in field names
// and limits, which the callers pass in.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"
#include "serve/json_body.h"

namespace kvmem::serve {

// What the server knows about a request besides its body.
struct RequestContext {
  std::string tenant;                          // from the API key
  std::optional<std::string> header_agent_id;  // X-Agent-Id, when sent
  ModelInfo model;
};

// Agent ids key persisted caches, so they follow the store's one rule
// (memory::store::ValidateAgentId: 1..256 bytes of UTF-8, no control characters); `source` names
// the field or header the id came from in the InvalidArgument message.
Status ValidateAgentId(std::string_view id, std::string_view source);

// The agent of a request: the X-Agent-Id header, else `body_id` (named `body_field` in errors),
// else anonymous (""). InvalidArgument when both are given and differ.
Result<std::string> ResolveAgentId(const RequestContext& ctx,
                                   const std::optional<std::string>& body_id,
                                   std::string_view body_field);

// An integer token budget in [min_value, context_length].
Result<std::optional<int>> ReadMaxTokens(const Json& body, std::string_view key, int context_length,
                                         int min_value = 1);

struct SamplingLimits {
  double max_temperature;  // OpenAI 2, Anthropic 1
};
// temperature, top_p, top_k, min_p, seed, and repetition_penalty (a common extension).
Result<SamplingParams> ReadSamplingParams(const Json& body, const SamplingLimits& limits);

// Stop strings from `key`: an array of at most `max_count` non-empty strings, or (when
// `allow_single_string`) one string.
Result<std::vector<std::string>> ReadStopStrings(const Json& body, std::string_view key,
                                                 size_t max_count, bool allow_single_string);

// kvmem's "retrieval_query" extension (GenerationRequest::retrieval_query): absent, or a
// non-empty string.
Result<std::optional<std::string>> ReadRetrievalQuery(const Json& body);

// kvmem's "on_diverge" extension (GenerationRequest::on_diverge): absent (fork), or one of
// "fork", "replace", "reject".
Result<OnDiverge> ReadOnDiverge(const Json& body);

// Message content: a string, or an array of {"type": "text", "text": "…"} parts joined with
// "\n" (other part types, such as images or tool calls, are Unsupported). `text_types`: the
// part types that hold text (the Responses API's "input_text" and "output_text").
Result<std::string> ReadTextContent(const Json& content, std::string_view field,
                                    std::initializer_list<std::string_view> text_types = {"text"});

// The required, non-empty `messages` array, each element parsed by parse_one(element, its field
// name "messages[i]"), appended to *out. Both dialects share this shape; their elements differ.
Status ReadMessages(const Json& body,
                    const std::function<Result<ChatMessage>(const Json&, const std::string&)>& parse_one,
                    std::vector<ChatMessage>* out);

// InvalidArgument "'<key>': not supported by kvmem" when `key` is present with a value that
// asks for something (a non-empty array or object, true, a non-empty string).
Status RejectIfRequested(const Json& body, std::string_view key);

}  // namespace kvmem::serve
