#include "serve/request_fields.h"

#include <algorithm>
#include <cstdio>

#include "memory/store/agent_id.h"

namespace kvmem::serve {
namespace {

std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A number field within [lo, hi] (or (lo, hi] when `open_low`).
Result<std::optional<double>> ReadNumberIn(const Json& body, std::string_view key, double lo,
                                           double hi, bool open_low) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<double> v, OptionalNumber(body, key, key));
  if (!v) return v;
  const bool low_ok = open_low ? *v > lo : *v >= lo;
  if (!low_ok || *v > hi) {
    return FieldError(key, "must be in " + std::string(open_low ? "(" : "[") + FormatNumber(lo) +
                               ", " + FormatNumber(hi) + "], got " + FormatNumber(*v));
  }
  return v;
}

}  // namespace

Status ValidateAgentId(std::string_view id, std::string_view source) {
  const Status valid = memory::store::ValidateAgentId(id);
  return valid.ok() ? valid : FieldError(source, valid.message());
}

Result<std::string> ResolveAgentId(const RequestContext& ctx,
                                   const std::optional<std::string>& body_id,
                                   std::string_view body_field) {
  if (ctx.header_agent_id) {
    KVMEM_RETURN_IF_ERROR(ValidateAgentId(*ctx.header_agent_id, "X-Agent-Id"));
    if (body_id && *body_id != *ctx.header_agent_id) {
      return FieldError(body_field, "names agent '" + *body_id +
                                        "' but the X-Agent-Id header names '" +
                                        *ctx.header_agent_id + "'");
    }
    return *ctx.header_agent_id;
  }
  if (!body_id) return std::string();
  KVMEM_RETURN_IF_ERROR(ValidateAgentId(*body_id, body_field));
  return *body_id;
}

Result<std::optional<int>> ReadMaxTokens(const Json& body, std::string_view key, int context_length,
                                         int min_value) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(body, key, key));
  if (!v) return std::optional<int>();
  if (*v < min_value) {
    return FieldError(key, "must be at least " + std::to_string(min_value) +
                               (min_value == 0 ? "" : " (0 only with echo)") + ", got " +
                               std::to_string(*v));
  }
  if (*v > context_length) {
    return FieldError(key, std::to_string(*v) + " exceeds the model's context length of " +
                               std::to_string(context_length) + " tokens");
  }
  return std::optional<int>(static_cast<int>(*v));
}

Result<SamplingParams> ReadSamplingParams(const Json& body, const SamplingLimits& limits) {
  SamplingParams p;
  KVMEM_ASSIGN_OR_RETURN(auto temperature,
                         ReadNumberIn(body, "temperature", 0, limits.max_temperature, false));
  if (temperature) p.temperature = static_cast<float>(*temperature);
  KVMEM_ASSIGN_OR_RETURN(auto top_p, ReadNumberIn(body, "top_p", 0, 1, true));
  if (top_p) p.top_p = static_cast<float>(*top_p);
  KVMEM_ASSIGN_OR_RETURN(auto min_p, ReadNumberIn(body, "min_p", 0, 1, false));
  if (min_p) p.min_p = static_cast<float>(*min_p);
  KVMEM_ASSIGN_OR_RETURN(auto penalty, ReadNumberIn(body, "repetition_penalty", 0, 10, true));
  if (penalty) p.repeat_penalty = static_cast<float>(*penalty);

  KVMEM_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, OptionalInt(body, "top_k", "top_k"));
  if (top_k) {
    // -1 is vLLM's spelling of "off"; 0 is ours.
    if (*top_k < -1 || *top_k > 1'000'000) {
      return FieldError("top_k",
                        "must be -1, 0 (off) or a positive count, got " + std::to_string(*top_k));
    }
    p.top_k = static_cast<int>(std::max<int64_t>(*top_k, 0));
  }
  // Seeds are opaque 64-bit values; negative ones are accepted as their two's complement.
  const Json* seed = FindField(body, "seed");
  if (seed != nullptr) {
    if (seed->is_number_unsigned()) {
      p.seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      p.seed = static_cast<uint64_t>(seed->get<int64_t>());
    } else {
      return TypeError("seed", "an integer", *seed);
    }
  }
  return p;
}

Result<std::vector<std::string>> ReadStopStrings(const Json& body, std::string_view key,
                                                 size_t max_count, bool allow_single_string) {
  std::vector<std::string> out;
  const Json* v = FindField(body, key);
  if (v == nullptr) return out;
  if (v->is_string() && allow_single_string) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_count) {
      return FieldError(key, "at most " + std::to_string(max_count) + " stop sequences, got " +
                                 std::to_string(v->size()));
    }
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& s = (*v)[i];
      if (!s.is_string()) {
        return TypeError(std::string(key) + "[" + std::to_string(i) + "]", "a string", s);
      }
      out.push_back(s.get<std::string>());
    }
  } else {
    return TypeError(
        key, allow_single_string ? "a string or an array of strings" : "an array of strings", *v);
  }
  for (const std::string& s : out) {
    if (s.empty()) return FieldError(key, "stop sequences must not be empty");
  }
  return out;
}

Result<std::optional<std::string>> ReadRetrievalQuery(const Json& body) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> q,
                         OptionalString(body, "retrieval_query", "retrieval_query"));
  if (q && q->empty()) return FieldError("retrieval_query", "must not be empty");
  return q;
}

Result<OnDiverge> ReadOnDiverge(const Json& body) {
  KVMEM_ASSIGN_OR_RETURN(std::optional<std::string> v,
                         OptionalString(body, "on_diverge", "on_diverge"));
  if (!v) return OnDiverge::kFork;
  for (OnDiverge d : {OnDiverge::kFork, OnDiverge::kReplace, OnDiverge::kReject}) {
    if (*v == memory::OnDivergeName(d)) return d;
  }
  return FieldError("on_diverge", "must be \"fork\", \"replace\" or \"reject\"");
}

Result<std::string> ReadTextContent(const Json& content, std::string_view field,
                                    std::initializer_list<std::string_view> text_types) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return TypeError(field, "a string or an array of text parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_field = std::string(field) + "[" + std::to_string(i) + "]";
    const Json& part = content[i];
    if (!part.is_object()) return TypeError(part_field, "an object", part);
    KVMEM_ASSIGN_OR_RETURN(std::string type, RequiredString(part, "type", part_field + ".type"));
    if (std::find(text_types.begin(), text_types.end(), type) == text_types.end()) {
      return Status(ErrorCode::kUnsupported, "'" + part_field + ".type': content of type '" + type +
                                                 "' is not supported by kvmem (text only)");
    }
    KVMEM_ASSIGN_OR_RETURN(std::string part_text,
                           RequiredString(part, "text", part_field + ".text"));
    if (i > 0) text.push_back('\n');
    text += part_text;
  }
  return text;
}

Status RejectIfRequested(const Json& body, std::string_view key) {
  const Json* v = FindField(body, key);
  if (v == nullptr) return Status::Ok();
  bool requested = true;
  if (v->is_boolean()) {
    requested = v->get<bool>();
  } else if (v->is_string()) {
    requested = !v->get<std::string>().empty();
  } else if (v->is_number()) {
    requested = v->get<double>() != 0;
  } else if (v->is_array() || v->is_object()) {
    requested = !v->empty();
  }
  if (!requested) return Status::Ok();
  return Status(ErrorCode::kUnsupported, "'" + std::string(key) + "': not supported by kvmem");
}

Status ReadMessages(const Json& body,
                    const std::function<Result<ChatMessage>(const Json&, const std::string&)>& parse_one,
                    std::vector<ChatMessage>* out) {
  const Json* messages = FindField(body, "messages");
  if (messages == nullptr) return FieldError("messages", "required");
  if (!messages->is_array()) return TypeError("messages", "an array", *messages);
  if (messages->empty()) return FieldError("messages", "must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    KVMEM_ASSIGN_OR_RETURN(ChatMessage m,
                           parse_one((*messages)[i], "messages[" + std::to_string(i) + "]"));
    out->push_back(std::move(m));
  }
  return Status::Ok();
}

}  // namespace kvmem::serve
