// The server under concurrent load: parallel clients, the admission limit, client
// disconnects reaching the backend, and graceful shutdown.
#include <gtest/gtest.h>

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

TEST(HttpConcurrency, RefusesBeyondMaxConcurrentRequests) {
  HttpServerOptions o;
  o.max_concurrent_requests = 2;
  ServerFixture f(o);
  std::vector<std::thread> blocked;
  std::atomic<int> statuses_200{0};
  for (int i = 0; i < 2; ++i) {
    blocked.emplace_back([&, i] {
      auto res = f.Post("/v1/chat/completions",
                        ChatBody("[block] " + std::to_string(i), {{"stream", i == 1}}));
      if (res && res->status == 200) ++statuses_200;
    });
  }
  ASSERT_TRUE(f.backend().WaitBlocked(2));
  EXPECT_EQ(f.server().in_flight(), 2);

  auto openai = f.Post("/v1/chat/completions", ChatBody("x"));
  ASSERT_TRUE(openai);
  EXPECT_EQ(openai->status, 503);
  EXPECT_EQ(openai->get_header_value("Retry-After"), "1");
  EXPECT_EQ(ParseJson(openai->body)["error"]["code"], "server_overloaded");
  auto anthropic = f.Post("/v1/messages", MessagesBody("x", {{"stream", true}}));
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->status, 529);
  EXPECT_EQ(ParseJson(anthropic->body)["error"]["type"], "overloaded_error");
  // Routes that do not generate stay available.
  EXPECT_EQ(f.Get("/health")->status, 200);
  EXPECT_EQ(f.Get("/v1/agents")->status, 200);

  f.backend().Release();
  for (auto& t : blocked) t.join();
  EXPECT_EQ(statuses_200.load(), 2);
  EXPECT_TRUE(Eventually([&] { return f.server().in_flight() == 0; }));
  EXPECT_EQ(f.Post("/v1/chat/completions", ChatBody("x"))->status, 200);
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
  bad.max_concurrent_requests = 0;
  EXPECT_EQ(HttpServer(&backend, bad).Start().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmem::serve::testing
