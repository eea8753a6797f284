// kvmem's HTTP server: the OpenAI and Anthropic APIs, the agents API, health and metrics,
// over a Backend.
//
//   POST   /v1/chat/completions   OpenAI chat (openai_api.h)
//   POST   /v1/completions        OpenAI text completion
//   POST   /v1/messages           Anthropic messages (anthropic_api.h)
//   POST   /v1/responses          OpenAI Responses (responses_api.h): a chain of responses is
//                                 one agent, continued by previous_response_id
//   GET    /v1/responses/{id}     a stored response; DELETE /v1/responses/{id} forgets it
//   GET    /v1/models[/{id}]      the loaded model (Anthropic's shape when the request has an
//                                 anthropic-version header)
//   POST   /v1/messages/count_tokens  Anthropic's token count of a prompt
//   POST   /v1/embeddings         OpenAI embeddings (embeddings_api.h)
//   POST   /tokenize, /detokenize llama.cpp's tokenizer endpoints (tokenize_api.h)
//   GET    /v1/agents             the tenant's agents (agents_api.h)
//   POST   /v1/agents             create one with its memory policy
//   GET    /v1/agents/{id}        {id} percent-encoded (agent_path.h)
//   DELETE /v1/agents/{id}
//   POST   /v1/agents/{id}/rebuild
//   GET    /v1/agents/{id}/memory, /v1/agents/{id}/turns  the memory inspector's API
//                                 (inspector_api.h)
//   GET    /ui, /ui/{file}        the memory inspector's page (ui_assets.h); never needs a key
//   OPTIONS *                      CORS preflight (cors.h)
//   GET    /health                {"status":"ok"}; 503 while stopping; never needs a key
//   GET    /metrics               Prometheus text (metrics.h)
//
// Auth: with api_keys set, every route but /health and /ui needs `Authorization: Bearer KEY` or
// `x-api-key: KEY`; the key decides the tenant. Browser origins: cors.h. Errors come in the
// dialect of the route (/v1/messages*: Anthropic's, everything else: OpenAI's) with the
// statuses of api_error.h.
//
// Connections: http_front.h accepts them and reads each request in full (headers and body
// within request_timeout_s of its first byte; at most max_client_connections open per client
// address) without taking a thread, so stalled or slow clients cannot starve the others; idle
// keep-alive connections wait there too, up to keep_alive_timeout_s. Complete requests are
// served by a pool of `threads` threads; accept_queue more may wait for one, the rest get 503
// with Retry-After. The routes themselves are cpp-httplib's, run on the front end's
// connections.
//
// Concurrency: at most max_running generation requests run at once (one per agent),
// max_queue more wait, fairly by tenant then agent, and the rest are refused at once with 429
// (OpenAI) / 529 (Anthropic) and Retry-After: 1 (admission.h). A client that disconnects,
// streamed or not, is noticed at the generation's next piece (client_connection.h) and its
// generation cancelled; a queued one leaves the queue.
//
// Thread-safety: Start and Stop from one thread; port(), in_flight(), connections() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/admission.h"
#include "serve/backend.h"
#include "serve/cors.h"
#include "serve/http_front.h"
#include "serve/metrics.h"

namespace kvmem::serve {

struct ApiKey {
  std::string key;
  std::string tenant;  // the namespace of the agents this key may see
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see HttpServer::port())
  // Empty: no authentication, every request is tenant "default".
  std::vector<ApiKey> api_keys;
  // Larger bodies get 413, counted after decoding (chunked transfer, gzip/brotli content).
  size_t max_body_bytes = size_t{32} << 20;
  int max_running = 16;  // generation requests running at once (admission.h)
  int max_queue = 64;    // generation requests waiting beyond them; more get 429/529
  int threads = 0;  // HTTP worker threads; 0: max_running + max_queue + 16 (a queued request
                    // holds its thread; spare for the health, metrics and agent routes and for
                    // refusing the overflow)
  int accept_queue = 64;            // complete requests waiting for a free thread; more get 503
  int max_client_connections = 64;  // open connections per client address; more get 503
  int request_timeout_s = 10;       // a request's headers and body, from its first byte; then 408
  int keep_alive_timeout_s = 5;
  int write_timeout_s = 30;  // per socket write: a client that stops reading is dropped
  // Browser origins allowed to call the API (cors.h): "https://app.example" or "*".
  std::vector<std::string> cors_origins;
  // Stop() lets admitted generations finish for this long, then cancels them.
  std::chrono::milliseconds shutdown_grace{10000};
};

inline constexpr const char* kDefaultTenant = "default";

class HttpServer {
 public:
  // `backend` must outlive the server.
  HttpServer(Backend* backend, HttpServerOptions options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread. IoError when the address cannot be bound,
  // InvalidArgument for unusable options.
  Status Start();
  // Graceful: refuses new generations (503/529), sends the queued ones away (503/529) and
  // reports /health 503, waits up to
  // shutdown_grace for admitted ones, cancels the rest (their backends see OnText return
  // false; streams end with an error event), then closes the listener and joins every
  // thread. Idempotent.
  void Stop();

  int port() const { return port_; }  // the bound port, once Start succeeded
  int64_t in_flight() const { return in_flight_.load(); }  // generation requests running or queued
  AdmissionCounts admission() const;
  const ServerMetrics& metrics() const { return metrics_; }
  FrontCounts connections() const { return front_ ? front_->counts() : FrontCounts{}; }

 private:
  class Handlers;
  class Router;

  Backend* backend_;
  HttpServerOptions options_;
  ServerMetrics metrics_;
  CorsPolicy cors_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<Router> http_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<HttpFront> front_;
  int port_ = 0;
  bool started_ = false;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cancel_all_{false};
};

}  // namespace kvmem::serve
