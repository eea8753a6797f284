#include "serve/api_error.h"

#include <iterator>
#include <nlohmann/json.hpp>

namespace kvmem::serve {
namespace {

struct KindInfo {
  int openai_status;
  int anthropic_status;
  const char* openai_type;
  const char* openai_code;  // nullptr: JSON null
  const char* anthropic_type;
};

// Indexed by ApiErrorKind.
constexpr KindInfo kKinds[] = {
    {400, 400, "invalid_request_error", nullptr, "invalid_request_error"},
    {400, 400, "invalid_request_error", "context_length_exceeded", "invalid_request_error"},
    {401, 401, "invalid_request_error", "invalid_api_key", "authentication_error"},
    {403, 403, "invalid_request_error", "permission_denied", "permission_error"},
    {404, 404, "invalid_request_error", "not_found", "not_found_error"},
    {405, 405, "invalid_request_error", "method_not_allowed", "invalid_request_error"},
    {409, 409, "invalid_request_error", "conflict", "invalid_request_error"},
    {413, 413, "invalid_request_error", "request_too_large", "request_too_large"},
    {408, 408, "invalid_request_error", "request_timeout", "invalid_request_error"},
    {429, 529, "requests", "rate_limit_exceeded", "overloaded_error"},
    {503, 529, "server_error", "server_overloaded", "overloaded_error"},
    {500, 500, "server_error", "internal_error", "api_error"},
};

static_assert(std::size(kKinds) == static_cast<size_t>(ApiErrorKind::kInternal) + 1);

const KindInfo& Info(ApiErrorKind kind) { return kKinds[static_cast<int>(kind)]; }

// "'<field>': ..." (json_body.h's FieldError and TypeError) names <field>; other messages none.
std::string FieldOf(const std::string& message) {
  if (!message.starts_with('\'')) return "";
  const size_t end = message.find("': ", 1);
  return end == std::string::npos ? "" : message.substr(1, end - 1);
}

}  // namespace

ApiError ApiErrorFromStatus(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
      return {ApiErrorKind::kInvalidRequest, status.message(), FieldOf(status.message())};
    case ErrorCode::kOutOfRange:  // parsers report fields as kInvalidArgument; this is the context
      return {ApiErrorKind::kContextLength, status.message(), FieldOf(status.message())};
    case ErrorCode::kNotFound:
      return {ApiErrorKind::kNotFound, status.message()};
    case ErrorCode::kFailedPrecondition:
      return {ApiErrorKind::kConflict, status.message()};
    case ErrorCode::kUnauthenticated:
      return {ApiErrorKind::kAuthentication, status.message()};
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kUnavailable:
      return {ApiErrorKind::kOverloaded, status.message()};
    case ErrorCode::kOk:  // a caller bug; still never a 200 with an error body
    case ErrorCode::kIo:
    case ErrorCode::kCorrupt:
    case ErrorCode::kInternal:
      break;
  }
  return {ApiErrorKind::kInternal, "internal server error"};
}

ApiErrorKind ApiErrorKindFromHttpStatus(int http_status) {
  switch (http_status) {
    case 401:
      return ApiErrorKind::kAuthentication;
    case 403:
      return ApiErrorKind::kPermission;
    case 404:
      return ApiErrorKind::kNotFound;
    case 405:
      return ApiErrorKind::kMethodNotAllowed;
    case 409:
      return ApiErrorKind::kConflict;
    case 408:
      return ApiErrorKind::kRequestTimeout;
    case 413:
      return ApiErrorKind::kRequestTooLarge;
    case 429:
      return ApiErrorKind::kQueueFull;
    case 503:
    case 529:
      return ApiErrorKind::kOverloaded;
    default:
      break;
  }
  return http_status >= 500 ? ApiErrorKind::kInternal : ApiErrorKind::kInvalidRequest;
}

int HttpStatus(ApiErrorKind kind, Dialect dialect) {
  const KindInfo& info = Info(kind);
  return dialect == Dialect::kAnthropic ? info.anthropic_status : info.openai_status;
}

std::string ErrorBody(const ApiError& error, Dialect dialect) {
  const KindInfo& info = Info(error.kind);
  nlohmann::json body;
  if (dialect == Dialect::kAnthropic) {
    body = {{"type", "error"},
            {"error", {{"type", info.anthropic_type}, {"message", error.message}}}};
  } else {
    body = {{"error",
             {{"message", error.message},
              {"type", info.openai_type},
              {"param", error.param.empty() ? nlohmann::json() : nlohmann::json(error.param)},
              {"code", info.openai_code ? nlohmann::json(info.openai_code) : nlohmann::json()}}}};
  }
  // Messages may quote client input; invalid UTF-8 in it must not make dump() throw.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvmem::serve
