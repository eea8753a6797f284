// Serving one generation request (POST /v1/chat/completions, /v1/completions, /v1/messages)
// once it is authenticated: admission against the concurrency limit, parsing in the route's
// dialect, then either a whole JSON reply or a stream of Server-Sent Events.
//
// Whole replies run the backend on the HTTP thread. Streams run it on a GenerationStream's own
// thread: the handler waits for the prompt to be accepted (so early failures keep their HTTP
// status), then hands the stream to the library's chunked content provider, which writes the
// events as they come and cancels the generation when a write fails (the client left). The
// admission slot is held until the generation has returned, whichever way it ends.
// Thread-safety: ServeGeneration is called from many HTTP threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/backend.h"
#include "serve/metrics.h"
#include "serve/reply_format.h"
#include "serve/request_fields.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kvmem::serve {

// The server state generation requests share; everything outlives the requests.
struct GenerationContext {
  Backend* backend;
  ServerMetrics* metrics;
  std::atomic<int64_t>* in_flight;  // admitted generation requests
  int64_t max_in_flight;
  const std::atomic<bool>* stopping;    // refuse new generations
  const std::atomic<bool>* cancel_all;  // make running ones stop (OnText returns false)
};

using RequestParser = Result<ParsedRequest> (*)(std::string_view body, const RequestContext&);

// `body` is the request body, already read within the size limit.
void ServeGeneration(const GenerationContext& ctx, Dialect dialect, RequestParser parse,
                     const httplib::Request& req, std::string_view body, httplib::Response& res,
                     const std::string& tenant);

}  // namespace kvmem::serve
