// The server under concurrent load: parallel clients, admission (running and queue limits,
// turns by tenant), client disconnects reaching the backend, and graceful shutdown.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve/http_server.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

using namespace std::chrono_literals;

// Polls `done` for up to 10 s.
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

TEST(HttpConcurrency, ParallelClientsOnDifferentAgents) {
  ServerFixture f;
  constexpr int kClients = 8;
  constexpr int kRequests = 5;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int r = 0; r < kRequests; ++r) {
        const std::string agent = "agent-" + std::to_string(c);
        const std::string word = "w" + std::to_string(c) + "-" + std::to_string(r);
        const bool stream = r % 2 == 1;
        auto res = f.Post(c % 2 ? "/v1/messages" : "/v1/chat/completions",
                          c % 2 ? MessagesBody(word + " [slow]", {{"stream", stream}})
                                : ChatBody(word + " [slow]", {{"stream", stream}}),
                          {{"X-Agent-Id", agent}});
        if (!res || res->status != 200) continue;
        // Each reply echoes its own request: no cross-talk between concurrent streams.
        if (res->body.find(word) != std::string::npos) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
  EXPECT_GT(f.backend().max_active(), 1);  // they did overlap
  // A stream's slot is released just after its last byte is written.
  EXPECT_TRUE(Eventually([&] { return f.server().in_flight() == 0; }));
  auto agents = f.Get("/v1/agents");
  ASSERT_TRUE(agents);
  EXPECT_EQ(ParseJson(agents->body)["data"].size(), size_t{kClients});
}

// --max-running 2 --max-queue 1: two run, one waits, the fourth is refused in each dialect.
TEST(HttpConcurrency, QueuesThenRefusesBeyondRunningAndQueue) {
  HttpServerOptions o;
  o.max_running = 2;
  o.max_queue = 1;
  ServerFixture f(o);
  std::vector<std::thread> clients;
  std::atomic<int> statuses_200{0};
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      auto res = f.Post("/v1/chat/completions",
                        ChatBody("[block] " + std::to_string(i), {{"stream", i == 1}}));
      if (res && res->status == 200) ++statuses_200;
    });
  }
  ASSERT_TRUE(f.backend().WaitBlocked(2));
  clients.emplace_back([&] {
    auto res = f.Post("/v1/messages", MessagesBody("queued"));
    if (res && res->status == 200) ++statuses_200;
  });
  ASSERT_TRUE(Eventually([&] { return f.server().admission().queued == 1; }));
  EXPECT_EQ(f.server().admission().running, 2);
  EXPECT_EQ(f.server().in_flight(), 3);

  auto openai = f.Post("/v1/chat/completions", ChatBody("x"));
  ASSERT_TRUE(openai);
  EXPECT_EQ(openai->status, 429);
  EXPECT_EQ(openai->get_header_value("Retry-After"), "1");
  EXPECT_EQ(ParseJson(openai->body)["error"]["type"], "requests");
  EXPECT_EQ(ParseJson(openai->body)["error"]["code"], "rate_limit_exceeded");
  auto anthropic = f.Post("/v1/messages", MessagesBody("x", {{"stream", true}}));
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->status, 529);
  EXPECT_EQ(anthropic->get_header_value("Retry-After"), "1");
  EXPECT_EQ(ParseJson(anthropic->body)["error"]["type"], "overloaded_error");
  EXPECT_EQ(f.server().admission().refused, 2u);
  // A malformed request is still told so, not refused for the load.
  EXPECT_EQ(f.Post("/v1/chat/completions", "{")->status, 400);
  // Routes that do not generate stay available.
  EXPECT_EQ(f.Get("/health")->status, 200);
  EXPECT_EQ(f.Get("/v1/agents")->status, 200);
  auto metrics = f.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvmem_requests_running 2\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("kvmem_requests_queued 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("kvmem_requests_refused_total 2\n"), std::string::npos);

  f.backend().Release();
  for (auto& t : clients) t.join();
  EXPECT_EQ(statuses_200.load(), 3);  // the queued one ran once a place was free
  EXPECT_TRUE(Eventually([&] { return f.server().in_flight() == 0; }));
  EXPECT_EQ(f.server().admission().running, 0);
  EXPECT_EQ(f.Post("/v1/chat/completions", ChatBody("x"))->status, 200);
}

// Tenant A's queued agents do not keep tenant B's one request waiting behind them.
TEST(HttpConcurrency, QueuedRequestsTakeTurnsByTenant) {
  HttpServerOptions o;
  o.max_running = 1;
  o.max_queue = 16;
  o.api_keys = {{"key-a", "A"}, {"key-b", "B"}};
  ServerFixture f(o);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  const auto send = [&](const std::string& key, const std::string& agent, const std::string& text) {
    clients.emplace_back([&, key, agent, text] {
      auto res = f.Post("/v1/chat/completions", ChatBody(text),
                        {{"Authorization", "Bearer " + key}, {"X-Agent-Id", agent}});
      if (res && res->status == 200) ++ok;
    });
  };
  send("key-a", "a0", "[block] first");
  ASSERT_TRUE(f.backend().WaitBlocked(1));
  for (int i = 1; i <= 6; ++i) {
    send("key-a", "a" + std::to_string(i), "flood");
    ASSERT_TRUE(Eventually([&] { return f.server().admission().queued == i; }));
  }
  send("key-b", "b", "single");
  ASSERT_TRUE(Eventually([&] { return f.server().admission().queued == 7; }));
  f.backend().Release();
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 8);
  // One runs at a time, so the backend's calls are the order of admission.
  EXPECT_EQ(f.backend().call_agents(),
            (std::vector<std::string>{"a0", "b", "a1", "a2", "a3", "a4", "a5", "a6"}));
}

// Sends `body` to `path` on a raw connection, waits `delay`, and hangs up without reading.
void SendAndHangUp(int port, const std::string& path, const std::string& body,
                   std::chrono::milliseconds delay) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string request = "POST " + path +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(delay);
  close(fd);
}

// A whole (stream: false) reply's client hangs up mid-generation: the backend is stopped at its
// next piece, not at the end of the reply.
TEST(HttpConcurrency, ClientDisconnectStopsAWholeReply) {
  ServerFixture f;
  for (const char* path : {"/v1/chat/completions", "/v1/messages"}) {
    const int cancelled_before = f.backend().cancelled();
    const int64_t pieces_before = f.backend().pieces_sent();
    const std::string body =
        std::string(path) == "/v1/messages"
            ? MessagesBody("[slow] [words:100000]", {{"max_tokens", 4096}})
            : ChatBody("[slow] [words:100000]");
    SendAndHangUp(f.port(), path, body, 200ms);
    EXPECT_TRUE(Eventually([&] { return f.backend().cancelled() == cancelled_before + 1; }))
        << path;
    EXPECT_TRUE(Eventually([&] { return f.server().in_flight() == 0; }));
    // 4096 or more pieces at 2 ms each would take seconds.
    EXPECT_LT(f.backend().pieces_sent() - pieces_before, 2000) << path;
  }
  auto metrics = f.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvmem_generations_finished_total{reason=\"cancelled\"} 2\n"),
            std::string::npos);
}

// A queued request whose client hangs up leaves the queue without running.
TEST(HttpConcurrency, ClientDisconnectLeavesTheQueue) {
  HttpServerOptions o;
  o.max_running = 1;
  o.max_queue = 4;
  ServerFixture f(o);
  std::thread blocked([&] { f.Post("/v1/chat/completions", ChatBody("[block] x")); });
  ASSERT_TRUE(f.backend().WaitBlocked(1));
  std::thread leaver([&] {
    SendAndHangUp(f.port(), "/v1/chat/completions", ChatBody("never runs"), 300ms);
  });
  ASSERT_TRUE(Eventually([&] { return f.server().admission().queued == 1; }));
  leaver.join();
  EXPECT_TRUE(Eventually([&] { return f.server().admission().queued == 0; }));
  EXPECT_EQ(f.server().in_flight(), 1);
  f.backend().Release();
  blocked.join();
  EXPECT_EQ(f.backend().calls(), 1);  // the one that left never reached the backend
  EXPECT_EQ(f.server().admission().refused, 0u);
}

// A client that stops reading a stream makes the backend's OnText return false.
TEST(HttpConcurrency, ClientDisconnectStopsTheBackend) {
  ServerFixture f;
  for (const char* path : {"/v1/chat/completions", "/v1/messages"}) {
    const int cancelled_before = f.backend().cancelled();
    const int64_t pieces_before = f.backend().pieces_sent();
    auto cli = f.Client();
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = {{"Content-Type", "application/json"}};
    req.body = std::string(path) == "/v1/messages"
                   ? MessagesBody("[slow] [words:100000]", {{"stream", true}, {"max_tokens", 4096}})
                   : ChatBody("[slow] [words:100000]", {{"stream", true}});
    std::string received;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      received.append(data, n);
      return received.size() < 2000;  // hang up after a few events
    };
    auto res = cli->send(req);
    EXPECT_FALSE(res);  // canceled by the receiver
    cli.reset();
    EXPECT_TRUE(Eventually([&] { return f.backend().cancelled() == cancelled_before + 1; }))
        << path;
    EXPECT_TRUE(Eventually([&] { return f.server().in_flight() == 0; }));
    // It stopped long before the end (100000 words at 2 ms each would take minutes).
    EXPECT_LT(f.backend().pieces_sent() - pieces_before, 20000) << path;
  }
}

TEST(HttpConcurrency, StopCancelsStreamsAfterTheGrace) {
  HttpServerOptions o;
  o.shutdown_grace = 100ms;
  ServerFixture f(o);
  std::string body;
  std::atomic<bool> streaming{false};
  std::thread client([&] {
    auto cli = f.Client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = ChatBody("[slow] [words:100000]", {{"stream", true}});
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      streaming = true;
      return true;
    };
    cli->send(req);
  });
  ASSERT_TRUE(Eventually([&] { return streaming.load(); }));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] { f.server().Stop(); });
  // Draining: the listener still answers, refusing new work.
  ASSERT_TRUE(Eventually([&] {
    auto health = f.Get("/health");
    return health && health->status == 503;
  }));
  auto during = f.Post("/v1/messages", MessagesBody("x"));
  ASSERT_TRUE(during);
  EXPECT_EQ(during->status, 529);
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  client.join();
  EXPECT_EQ(f.backend().cancelled(), 1);
  // The stream ends with an error event, not a silent truncation.
  const auto events = ParseSse(body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(ParseJson(events.back().data)["error"]["code"], "server_overloaded");
  f.server().Stop();  // idempotent
}

TEST(HttpConcurrency, StopWaitsForShortRequests) {
  HttpServerOptions o;
  o.shutdown_grace = 10s;
  ServerFixture f(o);
  std::atomic<int> status{0};
  std::thread client([&] {
    auto res = f.Post("/v1/chat/completions", ChatBody("[block] hi"));
    if (res) status = res->status;
  });
  ASSERT_TRUE(f.backend().WaitBlocked(1));
  std::thread stopper([&] { f.server().Stop(); });
  std::this_thread::sleep_for(50ms);  // Stop() is now waiting for the admitted request
  f.backend().Release();
  stopper.join();
  client.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_EQ(f.backend().cancelled(), 0);
}

TEST(HttpConcurrency, StartFailsOnABusyPort) {
  ServerFixture first;
  FakeBackend backend;
  HttpServerOptions o;
  o.port = first.port();
  HttpServer second(&backend, o);
  const Status s = second.Start();
  EXPECT_EQ(s.code(), ErrorCode::kIo) << s.ToString();
  HttpServerOptions bad;
  bad.max_running = 0;
  EXPECT_EQ(HttpServer(&backend, bad).Start().code(), ErrorCode::kInvalidArgument);
  HttpServerOptions negative_queue;
  negative_queue.max_queue = -1;
  EXPECT_EQ(HttpServer(&backend, negative_queue).Start().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmem::serve::testing
