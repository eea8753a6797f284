// Errors as the HTTP APIs report them. This is the one place where Status codes become HTTP
// statuses and where each dialect's error body is written:
//
//   kind               from                                   OpenAI  Anthropic (error type)
//   kInvalidRequest    kInvalidArgument, kUnsupported; bad     400     400 invalid_request_error
//                      JSON, invalid UTF-8, wrong field types
//   kContextLength     kOutOfRange: a prompt longer than the   400     400 invalid_request_error
//                      context (code context_length_exceeded)
//   kAuthentication    kUnauthenticated; missing/wrong key     401     401 authentication_error
//   kPermission        a browser origin --cors-origin does     403     403 permission_error
//                      not allow
//   kNotFound          kNotFound; unknown agent/model/route    404     404 not_found_error
//   kMethodNotAllowed  known path, wrong method                405     405 invalid_request_error
//   kConflict          kFailedPrecondition (e.g. deleting an   409     409 invalid_request_error
//                      agent that is generating)
//   kRequestTooLarge   body over max_body_bytes                413     413 request_too_large
//   kRequestTimeout    request not in within --request-timeout 408     408 invalid_request_error
//                      (http_front.h)
//   kQueueFull         --max-running generations run and       429     529 overloaded_error
//                      --max-queue wait (admission.h)          (type requests, code
//                                                              rate_limit_exceeded)
//   kOverloaded        kResourceExhausted, kUnavailable;       503     529 overloaded_error
//                      server stopping
//   kInternal          kIo, kCorrupt, kInternal; exceptions    500     500 api_error
//
// A full queue is 429 in OpenAI's dialect, shaped as OpenAI's own rate-limit errors, because
// that is what its clients and proxies treat as "back off and retry"; Anthropic's dialect has
// overloaded_error (529) for a full server and keeps rate_limit_error for per-key rates, which
// kvmem does not have. Other overload (stopping, the backend out of room) stays 503/529. The
// official clients retry all of these with backoff, honouring the Retry-After header the
// server sends with them. OpenAI bodies say
// "invalid_request_error" for every 4xx and "server_error" for 5xx, with a distinguishing
// `code` (context_length_exceeded, invalid_api_key, not_found, ...) and, for a client error
// about one field, that field in `param`: the parsers name it at the start of their messages
// ("'max_tokens': must be ...", json_body.h FieldError/TypeError), which is where it is read.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "core/status.h"

namespace kvmem::serve {

enum class Dialect { kOpenAi, kAnthropic };

enum class ApiErrorKind {
  kInvalidRequest,
  kContextLength,
  kAuthentication,
  kPermission,
  kNotFound,
  kMethodNotAllowed,
  kConflict,
  kRequestTooLarge,
  kRequestTimeout,
  kQueueFull,
  kOverloaded,
  kInternal,
};

struct ApiError {
  ApiErrorKind kind = ApiErrorKind::kInternal;
  std::string message;
  std::string param = {};  // OpenAI's `param`: the request field at fault; empty: null
};

// Internal faults keep their detail out of the message (the server logs it): file paths and
// store layout are not the client's business. `param` is the field a client error's message
// names first ("'messages[0].role': ..." gives "messages[0].role").
ApiError ApiErrorFromStatus(const Status& status);

// For errors the HTTP library raised itself (malformed request line, URI too long, ...): the
// kind whose body describes `http_status` best.
ApiErrorKind ApiErrorKindFromHttpStatus(int http_status);

int HttpStatus(ApiErrorKind kind, Dialect dialect);

// The dialect's error object, serialized:
//   OpenAI     {"error":{"message":…,"type":…,"param":…,"code":…}}
//   Anthropic  {"type":"error","error":{"type":…,"message":…}}
std::string ErrorBody(const ApiError& error, Dialect dialect);

}  // namespace kvmem::serve
