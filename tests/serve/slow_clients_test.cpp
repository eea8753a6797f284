// Slow and hostile clients (http_front.h): where a request ends (request_framing.h), stalled
// connections that must not starve the others, the request deadline (408), the per-client
// connection limit and the accept queue (503 with Retry-After), keep-alive pipelining.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve/http_server.h"
#include "serve/request_framing.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool Ready(std::string_view bytes, RequestFramingLimits limits = {}) {
  return ScanRequest(bytes, limits).ready;
}

TEST(RequestFraming, HeadersMustEnd) {
  EXPECT_FALSE(Ready(""));
  EXPECT_FALSE(ScanRequest("", {}).started);
  EXPECT_TRUE(ScanRequest("G", {}).started);
  EXPECT_FALSE(Ready("GET /health HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_FALSE(Ready("GET /health HTTP/1.1\r\nHost: x\r\n\r"));
  EXPECT_TRUE(Ready("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(Ready("GET /health HTTP/1.1\nHost: x\n\n"));
  // Headers that never end are the library's 400 once they pass the limit.
  const std::string endless = "GET / HTTP/1.1\r\nX: " + std::string(100, 'a');
  EXPECT_FALSE(Ready(endless, {.max_header_bytes = 200}));
  EXPECT_TRUE(Ready(endless + std::string(200, 'a'), {.max_header_bytes = 200}));
}

TEST(RequestFraming, ContentLength) {
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 5\r\n\r\n";
  EXPECT_FALSE(Ready(head));
  EXPECT_FALSE(Ready(head + "abcd"));
  EXPECT_TRUE(Ready(head + "abcde"));
  EXPECT_TRUE(Ready(head + "abcdeGET / HTTP/1.1\r\n"));  // a pipelined next request
  // Over the body limit: the library answers 413 without waiting for the body.
  EXPECT_TRUE(Ready("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", {.max_body_bytes = 999}));
  // A long body is handed over after its read-ahead; the worker reads the rest.
  EXPECT_TRUE(Ready(head.substr(0, head.size() - 4) + "0\r\n\r\nab", {.read_ahead_bytes = 2}));
  // Malformed lengths go to the library (400) at once.
  EXPECT_TRUE(Ready("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"));
  EXPECT_TRUE(Ready("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"));
  EXPECT_TRUE(Ready("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"));
}

TEST(RequestFraming, Chunked) {
  const std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n";
  EXPECT_FALSE(Ready(head));
  EXPECT_FALSE(Ready(head + "5\r\nab"));
  EXPECT_FALSE(Ready(head + "5\r\nabcde\r\n"));
  EXPECT_FALSE(Ready(head + "5;ext=1\r\nabcde\r\n0\r\n"));
  EXPECT_TRUE(Ready(head + "5;ext=1\r\nabcde\r\n0\r\n\r\n"));
  EXPECT_FALSE(Ready(head + "a\r\n0123456789\r\n0\r\nTrailer: x\r\n"));
  EXPECT_TRUE(Ready(head + "a\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n"));
  EXPECT_TRUE(Ready(head + "zz\r\n"));  // malformed: the library's 400
}

TEST(RequestFraming, ExpectContinueIsReadyAtItsHeaders) {
  EXPECT_TRUE(Ready("POST / HTTP/1.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n"));
}

// A TCP connection to the test server.
class Socket {
 public:
  explicit Socket(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool connected() const { return connected_; }
  bool Send(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Everything the server sends until it closes the connection or `timeout` passes.
  std::string ReadUntilClosed(std::chrono::milliseconds timeout) {
    std::string out;
    const auto deadline = Clock::now() + timeout;
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool connected_ = false;
  bool closed_ = false;
};

// The body of an HTTP response (after the blank line), parsed as JSON.
Json ResponseJson(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  if (at == std::string::npos) return Json();
  return ParseJson(response.substr(at + 4));
}

constexpr const char* kStalledPost =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";

// 300 connections that send a POST's headers and one byte of its body, then stall, cost no
// worker: with 4 workers /health and both kinds of chat reply still come at once.
TEST(SlowClients, StalledConnectionsDoNotStarveOthers) {
  HttpServerOptions o;
  o.threads = 4;
  o.max_client_connections = 1000;
  ServerFixture f(o);
  std::vector<std::unique_ptr<Socket>> stalled;
  for (int i = 0; i < 300; ++i) {
    stalled.push_back(std::make_unique<Socket>(f.port()));
    ASSERT_TRUE(stalled.back()->connected());
    ASSERT_TRUE(stalled.back()->Send(kStalledPost));
  }
  EXPECT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      if (f.server().connections().open >= 300) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }());
  const auto start = Clock::now();
  auto health = f.Get("/health");
  EXPECT_LT(Clock::now() - start, 1s);
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto whole = f.Post("/v1/chat/completions", ChatBody("hello"));
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 200) << whole->body;
  auto stream = f.Post("/v1/chat/completions", ChatBody("hello", {{"stream", true}}));
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  EXPECT_EQ(ParseSse(stream->body).back().data, "[DONE]");
  EXPECT_EQ(f.server().connections().timed_out, 0u);
}

// A request that does not arrive in full within request_timeout_s gets 408 and is closed,
// headers or body; the counts say so.
TEST(SlowClients, RequestTimeoutAnswers408) {
  HttpServerOptions o;
  o.request_timeout_s = 1;
  ServerFixture f(o);
  Socket body_stalled(f.port());
  ASSERT_TRUE(body_stalled.Send(kStalledPost));
  Socket headers_stalled(f.port());
  ASSERT_TRUE(headers_stalled.Send("GET /health HTTP/1.1\r\nHost: 127"));
  const auto start = Clock::now();
  for (Socket* s : {&body_stalled, &headers_stalled}) {
    const std::string response = s->ReadUntilClosed(5s);
    EXPECT_TRUE(response.starts_with("HTTP/1.1 408 ")) << response;
    EXPECT_TRUE(s->closed());
    EXPECT_EQ(ResponseJson(response)["error"]["code"], "request_timeout") << response;
  }
  EXPECT_GE(Clock::now() - start, 900ms);
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_EQ(f.server().connections().timed_out, 2u);
  EXPECT_EQ(f.server().connections().open, 0);
  auto metrics = f.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("\nkvmem_http_requests_timed_out_total 2\n"), std::string::npos);
  // A connection that sends nothing is closed silently at the same deadline.
  Socket silent(f.port());
  EXPECT_EQ(silent.ReadUntilClosed(5s), "");
  EXPECT_TRUE(silent.closed());
}

// Beyond max_client_connections open from one address, a connection gets 503, Retry-After and
// an OpenAI error body, before it sends anything; once one closes, the next is served.
TEST(SlowClients, ConnectionsPerClientAreLimited) {
  HttpServerOptions o;
  o.max_client_connections = 2;
  ServerFixture f(o);
  auto a = std::make_unique<Socket>(f.port());
  Socket b(f.port());
  ASSERT_TRUE(a->Send("GET /health HTTP/1.1\r\nHost: x\r\n"));  // half a request, held open
  ASSERT_TRUE(b.Send("GET /health HTTP/1.1\r\nHost: x\r\n"));
  Socket c(f.port());
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string refused = c.ReadUntilClosed(5s);
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 503 ")) << refused;
  EXPECT_NE(refused.find("\r\nRetry-After: 1\r\n"), std::string::npos) << refused;
  const Json error = ResponseJson(refused)["error"];
  EXPECT_EQ(error["type"], "server_error");
  EXPECT_NE(error["message"].get<std::string>().find("--max-client-connections"),
            std::string::npos);
  EXPECT_EQ(f.server().connections().refused_client_limit, 1u);
  a.reset();
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {  // the server notices the close within a tick
    Socket d(f.port());
    d.Send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    served = d.ReadUntilClosed(5s).starts_with("HTTP/1.1 200 ");
    if (!served) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(served);
}

// With every worker taken and accept_queue requests waiting, the next complete request gets
// 503 with Retry-After at once; it is served again once a worker is free.
TEST(SlowClients, AcceptQueueIsBounded) {
  HttpServerOptions o;
  o.threads = 1;
  o.accept_queue = 1;
  ServerFixture f(o);
  std::thread blocked([&] { f.Post("/v1/chat/completions", ChatBody("[block] x")); });
  ASSERT_TRUE(f.backend().WaitBlocked(1));
  Socket waiting(f.port());  // waits in the queue
  ASSERT_TRUE(waiting.Send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  std::this_thread::sleep_for(200ms);
  Socket refused(f.port());
  ASSERT_TRUE(refused.Send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string response = refused.ReadUntilClosed(5s);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 503 ")) << response;
  EXPECT_NE(response.find("\r\nRetry-After: 1\r\n"), std::string::npos) << response;
  EXPECT_NE(ResponseJson(response)["error"]["message"].get<std::string>().find("--accept-queue"),
            std::string::npos);
  EXPECT_EQ(f.server().connections().refused_busy, 1u);
  f.backend().Release();
  blocked.join();
  EXPECT_TRUE(waiting.ReadUntilClosed(5s).starts_with("HTTP/1.1 200 "));
}

// Two requests sent in one write on a keep-alive connection get two responses in order.
TEST(SlowClients, PipelinedRequestsOnOneConnection) {
  ServerFixture f;
  Socket s(f.port());
  const std::string body = ChatBody("pipelined");
  ASSERT_TRUE(s.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body +
                     "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const std::string both = s.ReadUntilClosed(10s);
  const size_t first = both.find("HTTP/1.1 200 ");
  const size_t second = both.find("HTTP/1.1 200 ", first + 1);
  ASSERT_NE(second, std::string::npos) << both;
  EXPECT_NE(both.find("pipelined"), std::string::npos);
  EXPECT_NE(both.find("\"status\""), std::string::npos);
  EXPECT_LT(both.find("pipelined"), second);
  EXPECT_TRUE(s.closed());
}

// A body longer than the front end reads ahead (1 MiB) is read on by the worker; a body that
// comes in pieces within the deadline is served.
TEST(SlowClients, LongAndPiecemealBodiesAreRead) {
  ServerFixture f;
  const std::string padded = std::string(size_t{3} << 20, ' ') + ChatBody("after the spaces");
  auto res = f.Post("/v1/chat/completions", padded);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->body.find("after the spaces"), std::string::npos);

  Socket s(f.port());
  const std::string body = ChatBody("piecemeal");
  ASSERT_TRUE(s.Send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"));
  std::this_thread::sleep_for(150ms);
  ASSERT_TRUE(s.Send("Content-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  for (size_t at = 0; at < body.size(); at += 16) {
    std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(s.Send(body.substr(at, 16)));
  }
  const std::string response = s.ReadUntilClosed(10s);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 ")) << response;
  EXPECT_NE(response.find("piecemeal"), std::string::npos);
}

}  // namespace
}  // namespace kvmem::serve::testing
