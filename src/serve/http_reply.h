// Writing replies into the HTTP library's responses: JSON bodies and API errors in a dialect
// (statuses and bodies from api_error.h, plus the headers that go with them: Retry-After on
// overload, WWW-Authenticate on 401). Internal errors are logged here with their detail, which
// the client does not see. Thread-safety: pure functions over one response.
#pragma once

#include <string>

#include "core/status.h"
#include "serve/api_error.h"

namespace httplib {
struct Response;
}

namespace kvmem::serve {

void SendJson(httplib::Response& res, std::string body);
void SendError(httplib::Response& res, const ApiError& error, Dialect dialect);
void SendStatus(httplib::Response& res, const Status& status, Dialect dialect);

// ApiErrorFromStatus, logging the Status first when it is a server fault.
ApiError ErrorFromStatus(const Status& status);

}  // namespace kvmem::serve
