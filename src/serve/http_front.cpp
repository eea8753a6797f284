#include "serve/http_front.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/log.h"
#include "serve/api_error.h"
#include "serve/client_connection.h"

namespace kvmem::serve {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};        // how often deadlines are checked
constexpr milliseconds kDrainTime{1000};  // a refused connection is read and discarded this long
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxEvents = 256;

int MillisUntil(Clock::time_point t) {
  const int64_t ms = std::chrono::duration_cast<milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

// The numeric address of `fd`'s peer, as getnameinfo(NI_NUMERICHOST) writes it.
std::string PeerAddress(int fd) {
  std::string ip;
  int port = 0;
  SocketEnd(fd, /*peer=*/true, &ip, &port);
  return ip;
}

// A whole response refusing a request: an OpenAI-shaped error body, Connection: close, and
// Retry-After with a 503.
std::string RefusalResponse(int status, const std::string& message) {
  const bool timeout = status == 408;
  const std::string body =
      ErrorBody({timeout ? ApiErrorKind::kRequestTimeout : ApiErrorKind::kOverloaded, message},
                Dialect::kOpenAi);
  std::string r = "HTTP/1.1 " + std::to_string(status) +
                  (timeout ? " Request Timeout\r\n" : " Service Unavailable\r\n");
  r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
       "\r\nConnection: close\r\n";
  if (!timeout) r += "Retry-After: 1\r\n";
  return r + "\r\n" + body;
}

}  // namespace

bool SocketEnd(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  sockaddr* a = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, a, &len) : getsockname(fd, a, &len)) != 0) return false;
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  char host[NI_MAXHOST] = {};
  if (getnameinfo(a, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return false;
  *ip = host;
  return true;
}

bool FrontConnection::Readable() {
  if (!unread().empty() || eof_) return true;
  buffer_.clear();
  read_at_ = 0;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  for (;;) {
    const int ready = poll(&p, 1, MillisUntil(deadline_));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;  // past the deadline
    char chunk[16 * 1024];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) {
      eof_ = true;
      return true;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
}

ssize_t FrontConnection::Read(char* out, size_t n) {
  if (!Readable()) return -1;
  const std::string_view bytes = unread();
  if (bytes.empty()) return 0;  // end of stream
  const size_t k = std::min(n, bytes.size());
  std::memcpy(out, bytes.data(), k);
  read_at_ += k;
  return static_cast<ssize_t>(k);
}

ssize_t FrontConnection::Write(const char* data, size_t n, milliseconds timeout) {
  size_t sent = 0;
  while (sent < n) {
    const ssize_t k = send(fd_, data + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      sent += static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!Writable(timeout)) return -1;
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      return -1;
    }
  }
  return static_cast<ssize_t>(n);
}

bool FrontConnection::Writable(milliseconds timeout) const {
  pollfd p{.fd = fd_, .events = POLLOUT, .revents = 0};
  const int ready = poll(&p, 1, static_cast<int>(timeout.count()));
  return ready > 0 && (p.revents & POLLOUT) != 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
}

HttpFront::HttpFront(HttpFrontOptions options, Serve serve)
    : options_(std::move(options)), serve_(std::move(serve)) {}

HttpFront::~HttpFront() { Stop(); }

FrontCounts HttpFront::counts() const {
  return FrontCounts{.open = open_.load(),
                     .refused_client_limit = refused_client_limit_.load(),
                     .refused_busy = refused_busy_.load(),
                     .timed_out = timed_out_.load()};
}

Status HttpFront::Start() {
  if (started_) return InvalidArgument("HTTP front end already started");
  if (options_.workers < 1 || options_.accept_queue < 0 || options_.max_client_connections < 1 ||
      options_.request_timeout.count() <= 0 || options_.keep_alive_timeout.count() <= 0 ||
      options_.max_requests_per_connection < 1) {
    return InvalidArgument(
        "HTTP workers, connections per client, timeouts and requests per connection must be "
        "positive, the accept queue not negative");
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int gai =
      getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &found);
  if (gai != 0) return IoError("cannot listen on " + where + ": " + gai_strerror(gai));
  int err = 0;
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: SO_REUSEPORT would let a second server bind the same port and
    // silently take half the connections; a busy port must be an error instead.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      err = errno;
      close(fd);
      continue;
    }
    listen_fd_ = fd;
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return IoError("cannot listen on " + where + ": " + std::strerror(err));
  std::string ip;
  SocketEnd(listen_fd_, /*peer=*/false, &ip, &port_);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{.events = EPOLLIN, .data = {.fd = wake_fd_}};
  if (epoll_fd_ < 0 || wake_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    const Status failed =
        IoError(std::string("cannot start the connection loop: ") + std::strerror(errno));
    for (int* fd : {&listen_fd_, &epoll_fd_, &wake_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    return failed;
  }
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  accepting_ = true;
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  loop_ = std::thread([this] { Loop(); });
  started_ = true;
  return Status::Ok();
}

void HttpFront::Stop() {
  if (!started_) return;
  started_ = false;
  stopping_ = true;
  Wake();
  loop_.join();  // returns once no connection is queued or held by a worker
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_exit_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  close(epoll_fd_);
  close(wake_fd_);
}

void HttpFront::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void HttpFront::Loop() {
  epoll_event events[kMaxEvents];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, static_cast<int>(kTick.count()));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        AcceptAll();
      } else if (fd == wake_fd_) {
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = read(wake_fd_, &count, sizeof(count));
      } else {
        OnReadable(fd);
      }
    }
    TakeReturned();
    if (stopping_ && listen_fd_ >= 0) {
      close(listen_fd_);  // also leaves the epoll set
      listen_fd_ = -1;
      while (!watched_.empty()) {
        Owned c = std::move(watched_.begin()->second);
        watched_.erase(watched_.begin());
        Close(std::move(c));
      }
    }
    if (stopping_ && busy_ == 0) break;
    Sweep();
  }
}

void HttpFront::AcceptAll() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: stop accepting for a tick rather than spin.
        KVMEM_LOG_WARN("accept: %s; pausing new connections", std::strerror(errno));
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accepting_ = false;
        accept_paused_until_ = Clock::now() + kTick;
      }
      return;
    }
    const int yes = 1;  // SSE events are small writes that must leave at once
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto c = std::make_unique<FrontConnection>(fd, PeerAddress(fd),
                                               Clock::now() + options_.request_timeout);
    int& open_from_peer = per_client_[c->peer()];
    if (open_from_peer >= options_.max_client_connections) {
      ++refused_client_limit_;
      Refuse(std::move(c), 503,
             "too many connections from this client: at most " +
                 std::to_string(options_.max_client_connections) +
                 " may be open at once (kvmem serve --max-client-connections)");
      continue;
    }
    ++open_from_peer;
    c->counted_ = true;
    ++open_;
    Watch(std::move(c));
  }
}

void HttpFront::OnReadable(int fd) {
  auto it = watched_.find(fd);
  if (it == watched_.end()) return;
  FrontConnection& c = *it->second;
  const bool was_idle = c.unread().empty();
  // Read what has come, but no more than the framing can want.
  const size_t cap =
      options_.framing.max_header_bytes + options_.framing.read_ahead_bytes + kReadChunk;
  bool closed = false;
  while (c.draining_ || c.buffer_.size() < cap) {
    // Through a scratch buffer, so a connection that sent a byte holds a byte, not a chunk.
    const ssize_t n = recv(fd, scratch_.data(), scratch_.size(), 0);
    if (n > 0) {
      if (!c.draining_) c.buffer_.append(scratch_.data(), static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  Owned owned;
  if (c.draining_) {
    if (!closed) return;
    owned = std::move(it->second);
    watched_.erase(it);
    return Close(std::move(owned));
  }
  if (was_idle && !c.unread().empty() && c.served_ > 0) {
    c.deadline_ = Clock::now() + options_.request_timeout;  // a keep-alive's next request
  }
  const bool ready = ScanRequest(c.unread(), options_.framing).ready;
  if (!ready && !closed) return;
  owned = std::move(it->second);
  watched_.erase(it);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  if (!ready) return Close(std::move(owned));  // the client left mid-request
  Dispatch(std::move(owned));
}

void HttpFront::Examine(Owned c) {
  if (!c->unread().empty() && ScanRequest(c->unread(), options_.framing).ready) {
    return Dispatch(std::move(c));
  }
  Watch(std::move(c));
}

void HttpFront::Dispatch(Owned c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The idle workers take theirs at once; accept_queue more may wait.
    if (static_cast<int64_t>(queue_.size()) <
        static_cast<int64_t>(idle_workers_) + options_.accept_queue) {
      queue_.push_back(std::move(c));
    }
  }
  if (c == nullptr) {
    ++busy_;
    work_cv_.notify_one();
    return;
  }
  ++refused_busy_;
  Refuse(std::move(c), 503,
         "server busy: every HTTP worker is taken and " + std::to_string(options_.accept_queue) +
             " requests already wait for one (kvmem serve --accept-queue); retry later");
}

void HttpFront::Refuse(Owned c, int status, const std::string& message) {
  const std::string response = RefusalResponse(status, message);
  // A fresh socket's buffer takes a response this small whole; if not, the client gets less.
  [[maybe_unused]] const ssize_t n =
      send(c->fd_, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(c->fd_, SHUT_WR);
  if (c->counted_) {
    if (--per_client_[c->peer_] == 0) per_client_.erase(c->peer_);
    c->counted_ = false;
    --open_;
  }
  // Read until the client closes (or kDrainTime), so that closing with its request unread
  // does not reset the connection before the client has read the answer.
  c->draining_ = true;
  c->buffer_.clear();
  c->read_at_ = 0;
  c->deadline_ = Clock::now() + kDrainTime;
  Watch(std::move(c));
}

void HttpFront::Close(Owned c) {
  if (c->counted_) {
    if (--per_client_[c->peer_] == 0) per_client_.erase(c->peer_);
    --open_;
  }
  close(c->fd_);  // also leaves the epoll set
}

void HttpFront::Watch(Owned c) {
  if (stopping_) return Close(std::move(c));
  epoll_event ev{.events = EPOLLIN | EPOLLRDHUP, .data = {.fd = c->fd_}};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd_, &ev) != 0) return Close(std::move(c));
  const int fd = c->fd_;
  watched_[fd] = std::move(c);
}

void HttpFront::Sweep() {
  const Clock::time_point now = Clock::now();
  if (now - last_sweep_ < kTick) return;
  last_sweep_ = now;
  if (!accepting_ && listen_fd_ >= 0 && now >= accept_paused_until_) {
    epoll_event ev{.events = EPOLLIN, .data = {.fd = listen_fd_}};
    accepting_ = epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev) == 0;
    if (!accepting_) accept_paused_until_ = now + kTick;
  }
  std::vector<int> expired;
  for (const auto& [fd, c] : watched_) {
    if (now >= c->deadline_) expired.push_back(fd);
  }
  for (int fd : expired) {
    auto it = watched_.find(fd);
    Owned c = std::move(it->second);
    watched_.erase(it);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    if (c->draining_ || c->unread().empty()) {
      Close(std::move(c));  // idle, or refused and drained long enough
      continue;
    }
    ++timed_out_;
    const int64_t seconds =
        std::chrono::duration_cast<std::chrono::seconds>(options_.request_timeout).count();
    Refuse(std::move(c), 408,
           "the request did not arrive in full within " + std::to_string(seconds) +
               " s (kvmem serve --request-timeout)");
  }
}

void HttpFront::TakeReturned() {
  std::vector<std::pair<Owned, bool>> returned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    returned.swap(returned_);
  }
  for (auto& [c, keep] : returned) {
    --busy_;
    if (keep && !stopping_) {
      Examine(std::move(c));
    } else {
      Close(std::move(c));
    }
  }
}

void HttpFront::Work() {
  for (;;) {
    Owned c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_workers_;
      work_cv_.wait(lock, [this] { return !queue_.empty() || workers_exit_; });
      --idle_workers_;
      if (queue_.empty()) return;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    const bool last = stopping_ || c->served_ + 1 >= options_.max_requests_per_connection;
    bool keep;
    {
      const ClientConnection::Serving serving(c->fd());  // for the handlers' ClientConnection
      keep = serve_(*c, last) && !last && !c->eof_;
    }
    ++c->served_;
    if (keep) {
      c->buffer_.erase(0, c->read_at_);
      c->buffer_.shrink_to_fit();  // an idle connection keeps no read buffer
      c->read_at_ = 0;
      c->deadline_ = Clock::now() +
                     (c->buffer_.empty() ? options_.keep_alive_timeout : options_.request_timeout);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.emplace_back(std::move(c), keep);
    }
    Wake();
  }
}

}  // namespace kvmem::serve
