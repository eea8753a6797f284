// Whether the client of an HTTP request is still connected, asked while its generation runs.
//
// Debian 12's cpp-httplib (0.11.4) gives a request handler no way to see its connection, and
// a whole (stream: false) reply is written only after the handler returns, so without this a
// client that hangs up is noticed by nobody and its generation runs to max_tokens. The request
// does carry both ends of its TCP connection (local and remote address and port). The front end
// (http_front.h) serves each request on one worker thread and names its socket to that thread
// (Serving); Find takes the socket of the request running on the calling thread, checks that its
// two ends are the request's, and Gone() asks the kernel about it without reading (poll for
// POLLRDHUP, then recv with MSG_PEEK: nothing is consumed), as the library's own is_socket_alive
// does. The client's FIN (it closed, or shut down its sending side: HTTP clients do neither while
// they wait for a reply) or a reset means gone; bytes waiting (a pipelined next request) or nothing
// to read means still there. Streams use it too, so both kinds of reply stop at the next token
// rather than at the next write that fails.
//
// The descriptor stays valid while the request's handler (or its content provider) runs: the
// HTTP worker that owns it closes it only after the response is done.
//
// Thread-safety: Gone() may be called from any one thread at a time; after it first returned
// true it keeps returning true.
#pragma once

#include <string>

namespace kvmem::serve {

class ClientConnection {
 public:
  // A connection that cannot be watched: Gone() is always false.
  ClientConnection() = default;

  // While it lives, `fd` is the socket of the request served on the calling thread. The front
  // end's worker holds one around each request it hands to the handlers.
  class Serving {
   public:
    explicit Serving(int fd);
    ~Serving();
    Serving(const Serving&) = delete;
    Serving& operator=(const Serving&) = delete;

   private:
    int previous_;
  };

  // The socket of the request served on the calling thread, if its local end is
  // local_addr:local_port and its peer remote_addr:remote_port (addresses as getnameinfo's
  // NI_NUMERICHOST writes them, as httplib::Request holds them). Unwatchable when there is none
  // (no Serving on this thread) or it does not match.
  static ClientConnection Find(const std::string& local_addr, int local_port,
                               const std::string& remote_addr, int remote_port);

  bool watched() const { return fd_ >= 0; }
  bool Gone();

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}

  int fd_ = -1;
  bool gone_ = false;
};

}  // namespace kvmem::serve
