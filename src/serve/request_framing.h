// Where an HTTP/1.1 request ends, from the bytes received so far: the connection front end
// (http_front.h) reads a request in full before it takes an HTTP worker, and this tells it
// when it has.
//
// It reads only the framing: the end of the headers (CRLF CRLF, or LF LF as the HTTP library
// also accepts), then Content-Length or chunked Transfer-Encoding (chunk sizes followed to the
// last chunk and its trailer). Everything else, and every malformed request, is left to the
// HTTP library, which answers it: such a request counts as ready, so that its error (400, 413,
// 414) comes at once instead of at the request deadline. A request that asks for
// `Expect: 100-continue` is ready at the end of its headers, since its client waits for the
// library's 100 before it sends the body.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvmem::serve {

struct RequestFramingLimits {
  size_t max_header_bytes = 64 * 1024;  // more, with no end of headers: ready (the library's 400)
  // A declared Content-Length above this is ready at the end of the headers (the library's 413).
  size_t max_body_bytes = size_t{32} << 20;
  // Body bytes worth reading ahead; a longer body is ready once this much of it has come (the
  // worker reads the rest, under the same deadline).
  size_t read_ahead_bytes = size_t{1} << 20;
};

struct RequestFraming {
  bool ready = false;    // hand the request to a worker now
  bool started = false;  // any byte of a request has come (a blank line before it does not count)
};

RequestFraming ScanRequest(std::string_view bytes, const RequestFramingLimits& limits);

}  // namespace kvmem::serve
