// A redis-server of its own for a test: started on a free loopback port in a temp directory,
// killed (SIGKILL) by Kill or the destructor, startable again on the same port and directory
// (its append-only file then brings back what it acknowledged). Header-only.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_util.h"

namespace kvmem::memory::store::testing {

inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class RedisServer {
 public:
  RedisServer() : port_(FreeLoopbackPort()) { Start(); }
  ~RedisServer() { Kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }

  void Start() {
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
               "--dir", dir_.path().c_str(), "--save", "", "--appendonly", "yes", "--appendfsync",
               "always", "--loglevel", "warning", "--logfile", (dir_ / "redis.log").c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(pid_, 0);
    for (int i = 0; i < 200; ++i) {  // up to 10 s
      if (Accepts()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        FAIL() << "redis-server exited (is it installed? scripts/install_deps.sh installs it)";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "redis-server did not accept connections on port " << port_;
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  bool Accepts() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }

  TempDir dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace kvmem::memory::store::testing
