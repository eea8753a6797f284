// Serving one generation request (POST /v1/chat/completions, /v1/completions, /v1/messages)
// once it is authenticated: parsing in the route's dialect, admission (admission.h: run, wait
// in the queue, or 429/529 when both are full), then either a whole JSON reply or a stream of
// Server-Sent Events.
//
// Whole replies run the backend on the HTTP thread. Streams run it on a GenerationStream's own
// thread: the handler waits for the prompt to be accepted (so early failures keep their HTTP
// status), then hands the stream to the library's chunked content provider, which writes the
// events as they come. Either way the client's connection is watched (client_connection.h):
// once it is gone, the queued request leaves the queue, or the generation's next OnText returns
// false. The running place is held until the generation has returned, whichever way it ends.
// Thread-safety: ServeGeneration is called from many HTTP threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/admission.h"
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
  Admission* admission;
  std::atomic<int64_t>* in_flight;      // generation requests running or queued
  const std::atomic<bool>* stopping;    // refuse new generations
  const std::atomic<bool>* cancel_all;  // make running ones stop (OnText returns false)
};

using RequestParser =
    std::function<Result<ParsedRequest>(std::string_view body, const RequestContext&)>;

// `body` is the request body, already read within the size limit.
void ServeGeneration(const GenerationContext& ctx, Dialect dialect, const RequestParser& parse,
                     const httplib::Request& req, std::string_view body, httplib::Response& res,
                     const std::string& tenant);

}  // namespace kvmem::serve
