// The connection front end of the HTTP server: it accepts connections and reads each request
// in full before an HTTP worker thread sees it, so that slow or hostile clients cost a socket
// and a buffer, never a worker.
//
// One thread runs an epoll loop over non-blocking sockets. It
//   - refuses a connection beyond max_client_connections open ones from the same address
//     (503, Retry-After);
//   - reads the request's headers and body (request_framing.h says where it ends; a long body
//     up to its read-ahead) and hands the complete request to the worker pool; a request not in
//     within request_timeout of its first byte (of the connection, for a new one) gets 408 and
//     the connection is closed, an idle keep-alive connection is closed after
//     keep_alive_timeout;
//   - answers 503 with Retry-After when accept_queue complete requests already wait for a free
//     worker.
// Refusals carry an OpenAI-shaped error body and Connection: close; the socket is then shut
// down for writing and drained for a moment, so the client reads the answer rather than a
// reset.
//
// A worker serves one request on its FrontConnection (the `serve` callback: read the rest,
// route, write the response; streams may write for as long as they run), then gives the
// connection back to the loop, which waits for the next request on it or closes it. Every
// connection is owned by one thread at a time (the loop, the queue, one worker), handed over
// under the pool's mutex; only the loop closes sockets and keeps the per-address counts.
//
// Thread-safety: Start and Stop from one thread; port() and counts() from any. Stop() closes
// idle and half-read connections at once, lets the workers finish the requests they hold (the
// `serve` callback is told it serves the connection's last request), then joins every thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "serve/request_framing.h"

namespace kvmem::serve {

struct HttpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int workers = 16;
  int accept_queue = 64;            // complete requests waiting for a worker; more get 503
  int max_client_connections = 64;  // open connections per client address; more get 503
  // A request's headers and body must all arrive within this of its first byte.
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds write_timeout{30000};      // per blocked write: a client that stops
                                                       // reading is dropped
  int max_requests_per_connection = 100;
  RequestFramingLimits framing;
};

// Connections refused or dropped since Start, and those open now.
struct FrontCounts {
  int64_t open = 0;                   // accepted and not yet closed (refused ones excluded)
  uint64_t refused_client_limit = 0;  // 503: max_client_connections
  uint64_t refused_busy = 0;          // 503: accept_queue full
  uint64_t timed_out = 0;             // 408: request_timeout
};

// One client connection while a worker serves it: the bytes the loop read ahead, then the
// socket. Reads stop at the request's deadline.
class FrontConnection {
 public:
  FrontConnection(int fd, std::string peer, std::chrono::steady_clock::time_point deadline)
      : fd_(fd), peer_(std::move(peer)), deadline_(deadline) {}

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }  // the client's numeric address

  // Up to `n` bytes of the request; 0 at end of stream, -1 on error or past the deadline.
  ssize_t Read(char* out, size_t n);
  // Whether a Read would return at once with bytes (waits up to the deadline).
  bool Readable();
  // All of `n` bytes, waiting at most `timeout` each time the socket buffer is full; n or -1.
  ssize_t Write(const char* data, size_t n, std::chrono::milliseconds timeout);
  bool Writable(std::chrono::milliseconds timeout) const;

 private:
  friend class HttpFront;

  std::string_view unread() const { return std::string_view(buffer_).substr(read_at_); }

  int fd_;
  std::string peer_;
  std::chrono::steady_clock::time_point deadline_;
  std::string buffer_;  // bytes received; [read_at_, size) not yet consumed
  size_t read_at_ = 0;
  int served_ = 0;         // requests served on this connection
  bool eof_ = false;       // the client shut down its side
  bool counted_ = false;   // in open_ and per_client_
  bool draining_ = false;  // refused: shut down for writing, read and discarded until closed
};

// The local (peer false) or remote end of socket `fd`: its numeric address as
// getnameinfo(NI_NUMERICHOST) writes it, as httplib::Request holds it. False when unknown.
bool SocketEnd(int fd, bool peer, std::string* ip, int* port);

class HttpFront {
 public:
  // Serves one request on `connection`; `last`: it must be the connection's last (send
  // Connection: close). Returns whether the connection stays open for another request.
  using Serve = std::function<bool(FrontConnection& connection, bool last)>;

  HttpFront(HttpFrontOptions options, Serve serve);
  ~HttpFront();  // Stop()
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Binds and starts the loop and the workers. IoError when the address cannot be bound,
  // InvalidArgument for unusable options.
  Status Start();
  void Stop();

  int port() const { return port_; }
  FrontCounts counts() const;

 private:
  using Clock = std::chrono::steady_clock;
  using Owned = std::unique_ptr<FrontConnection>;

  void Loop();
  void AcceptAll();
  void OnReadable(int fd);
  void Examine(Owned c);  // a connection with new bytes (or given back): dispatch or wait
  void Dispatch(Owned c);
  void Refuse(Owned c, int status, const std::string& message);
  void Close(Owned c);
  void Watch(Owned c);
  void Sweep();
  void TakeReturned();
  void Work();
  void Wake();

  HttpFrontOptions options_;
  Serve serve_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: connections given back, Stop
  int port_ = 0;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
  std::vector<std::thread> workers_;

  // The loop thread's alone.
  std::vector<char> scratch_ = std::vector<char>(64 * 1024);
  std::map<int, Owned> watched_;           // waiting for bytes, or draining
  std::map<std::string, int> per_client_;  // open connections by client address
  int64_t busy_ = 0;                       // connections queued or held by a worker
  Clock::time_point accept_paused_until_{};
  Clock::time_point last_sweep_{};
  bool accepting_ = false;

  // The pool: complete requests waiting, connections given back.
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<Owned> queue_;
  std::vector<std::pair<Owned, bool>> returned_;  // (connection, keep open)
  int idle_workers_ = 0;
  bool workers_exit_ = false;

  std::atomic<int64_t> open_{0};
  std::atomic<uint64_t> refused_client_limit_{0};
  std::atomic<uint64_t> refused_busy_{0};
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace kvmem::serve
