#include "serve/client_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kvmem::serve {
namespace {

// An address as httplib writes Request::remote_addr and local_addr.
bool Endpoint(const sockaddr_storage& addr, socklen_t len, std::string* ip, int* port) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  *ip = host;
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  return true;
}

// Whether `fd` is a TCP socket with exactly these two ends.
bool Matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  std::string ip;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (!Endpoint(addr, len, &ip, &port) || port != remote_port || ip != remote_addr) return false;
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return Endpoint(addr, len, &ip, &port) && port == local_port && ip == local_addr;
}

// The socket of the request this thread serves (-1: none). Find once scanned /proc/self/fd and
// fstat'ed every descriptor of the process, racing with the threads that open and close them
// (the front end's loop, the store, other requests' clients): ThreadSanitizer reported it, and a
// descriptor closed and reused mid-scan could be probed as another socket. Only the worker that
// owns a connection now looks at its descriptor.
thread_local int serving_fd = -1;

}  // namespace

ClientConnection::Serving::Serving(int fd) : previous_(serving_fd) { serving_fd = fd; }

ClientConnection::Serving::~Serving() { serving_fd = previous_; }

ClientConnection ClientConnection::Find(const std::string& local_addr, int local_port,
                                        const std::string& remote_addr, int remote_port) {
  if (serving_fd < 0 || local_port <= 0 || remote_port <= 0) return ClientConnection();
  if (!Matches(serving_fd, local_addr, local_port, remote_addr, remote_port)) {
    return ClientConnection();
  }
  return ClientConnection(serving_fd);
}

bool ClientConnection::Gone() {
  if (gone_ || fd_ < 0) return gone_;
  // POLLRDHUP: the peer's FIN arrived, even behind unread bytes (which a peek would see first).
  pollfd p{.fd = fd_, .events = POLLIN | POLLRDHUP, .revents = 0};
  const int ready = poll(&p, 1, 0);
  if (ready <= 0) return false;  // nothing to read (or EINTR): still there
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
    gone_ = true;
    return true;
  }
  char c;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  gone_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  return gone_;
}

}  // namespace kvmem::serve
