#include "serve/http_reply.h"

#include <httplib.h>

#include "core/log.h"

namespace kvmem::serve {

void SendJson(httplib::Response& res, std::string body) {
  res.status = 200;
  res.set_content(std::move(body), "application/json");
}

void SendError(httplib::Response& res, const ApiError& error, Dialect dialect) {
  res.status = HttpStatus(error.kind, dialect);
  if (error.kind == ApiErrorKind::kOverloaded || error.kind == ApiErrorKind::kQueueFull) {
    res.set_header("Retry-After", "1");
  }
  if (error.kind == ApiErrorKind::kAuthentication) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorBody(error, dialect), "application/json");
}

void SendStatus(httplib::Response& res, const Status& status, Dialect dialect) {
  SendError(res, ErrorFromStatus(status), dialect);
}

ApiError ErrorFromStatus(const Status& status) {
  ApiError error = ApiErrorFromStatus(status);
  if (error.kind == ApiErrorKind::kInternal) KVMEM_LOG_ERROR("%s", status.ToString().c_str());
  return error;
}

}  // namespace kvmem::serve
