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
// Concurrency: HTTP connections are served by a pool of `threads` threads (each keep-alive
// connection holds one while open, up to keep_alive_timeout_s idle). At most max_running
// generation requests run at once (one per agent), max_queue more wait, fairly by tenant then
// agent, and the rest are refused at once with 429 (OpenAI) / 529 (Anthropic) and
// Retry-After: 1 (admission.h). A client that disconnects, streamed or not, is noticed at the
// generation's next piece (client_connection.h) and its generation cancelled; a queued one
// leaves the queue.
//
// Thread-safety: Start and Stop from one thread; port() and in_flight() from any.
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
#include "serve/metrics.h"

namespace httplib {
class Server;
}

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
  int keep_alive_timeout_s = 5;
  int read_timeout_s = 30;   // per socket read of a request
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

 private:
  class Handlers;

  Backend* backend_;
  HttpServerOptions options_;
  ServerMetrics metrics_;
  CorsPolicy cors_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Handlers> handlers_;
  std::thread listener_;
  int port_ = 0;
  bool started_ = false;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> cancel_all_{false};
};

}  // namespace kvmem::serve
