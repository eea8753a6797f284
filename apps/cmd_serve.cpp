// `kvmem serve`: the OpenAI- and Anthropic-compatible HTTP server over per-agent KV memory
// (serve/http_server.h, serve/engine_backend.h). Runs until SIGINT/SIGTERM, then stops
// gracefully (admitted generations finish or are cancelled after the grace period).
#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent_env.h"
#include "commands.h"
#include "common.h"
#include "serve/engine_backend.h"
#include "serve/http_server.h"

namespace kvmem::app {
namespace {

struct ServeOptions {
  AgentEnvOptions env;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;  // KEY or KEY:TENANT
  std::vector<std::string> cors_origins;
  int max_running = 16;
  int max_queue = 64;
  int request_timeout_s = 10;
  int max_client_connections = 64;
  int accept_queue = 64;
};

Result<serve::ApiKey> ParseApiKey(const std::string& s) {
  const size_t colon = s.rfind(':');
  serve::ApiKey k;
  k.key = colon == std::string::npos ? s : s.substr(0, colon);
  k.tenant = colon == std::string::npos ? serve::kDefaultTenant : s.substr(colon + 1);
  if (k.key.empty()) return InvalidArgument("--api-key: empty key");
  KVMEM_RETURN_IF_ERROR(memory::store::ValidateTenant(k.tenant));
  return k;
}

// Turns allocate and free their buffers (agents' KV layers among them) on many threads, and glibc
// gives threads up to 8 arenas per core; each arena keeps the free chunks left between its live
// ones resident, so RSS climbs with the bytes in use flat. Under bench/soak.py (16 agents moving
// between the hot tier and the store) RSS grew 27% in the 7 minutes after warm-up with glibc's
// defaults (40% by 30 minutes), 9% with 2 arenas and a trim every 5 s (below; docs/reliability.md,
// "Load and soak"). The arena cap must be set before any thread starts.
void BoundAllocatorRetention() { mallopt(M_ARENA_MAX, 2); }

int Run(const ServeOptions& o) {
  BoundAllocatorRetention();
  serve::HttpServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.max_running = o.max_running;
  so.max_queue = o.max_queue;
  so.request_timeout_s = o.request_timeout_s;
  so.max_client_connections = o.max_client_connections;
  so.accept_queue = o.accept_queue;
  so.cors_origins = o.cors_origins;
  for (const std::string& k : o.api_keys) {
    auto key = ParseApiKey(k);
    if (!key.ok()) return Fail(key.status());
    so.api_keys.push_back(*key);
  }
  auto env = OpenAgentEnv(o.env);
  if (!env.ok()) return Fail(env.status());
  Status warm = (*env)->runtime->Warmup();
  if (!warm.ok()) return Fail(warm.WithContext("warm-up pass"));
  serve::EngineBackend backend((*env)->runtime.get(), *(*env)->tok, (*env)->model_name,
                               (*env)->encoder_name);
  serve::HttpServer server(&backend, so);
  // Every client connection is a descriptor, and the front end holds stalled ones cheaply: let
  // it hold as many as the hard limit allows (Debian's soft limit is 1024).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  // Block the signals in every thread; this one waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Status st = server.Start();
  if (!st.ok()) return Fail(st);
  std::fprintf(stderr,
               "kvmem serve: %s on http://%s:%d | context %lld per agent | KV %s | store %s\n",
               (*env)->model_name.c_str(), o.host.c_str(), server.port(),
               static_cast<long long>((*env)->runtime->n_ctx()),
               serve::KvFormatLabel((*env)->runtime->options().formats).c_str(),
               (*env)->store ? (*env)->store->model_dir().c_str() : "(none)");
  // This thread only waits for the signals; meanwhile it hands the allocator's free pages back
  // every few seconds (BoundAllocatorRetention): malloc_trim(0) releases whole free pages inside
  // every arena (madvise), not only at their tops; a pass over a few hundred MiB takes
  // milliseconds.
  int sig = 0;
  const timespec trim_every{.tv_sec = 5, .tv_nsec = 0};
  while ((sig = sigtimedwait(&signals, nullptr, &trim_every)) < 0) {
    if (errno == EAGAIN) malloc_trim(0);
  }
  std::fprintf(stderr, "kvmem serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  server.Stop();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI/Anthropic-compatible server; each agent's KV cache persists");
  AddAgentEnvOptions(cmd, &o->env);
  AddMemoryOptions(cmd, &o->env, "agents a chat request creates (POST /v1/agents chooses its own)");
  cmd->add_option("--host", o->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o->api_keys,
                  "require this key (Authorization: Bearer KEY or x-api-key); KEY:TENANT puts "
                  "the key's agents in their own namespace; repeatable");
  cmd->add_option("--cors-origin", o->cors_origins,
                  "let web pages of this origin (https://app.example:8443, or *) call the API "
                  "from a browser; repeatable");
  cmd->add_option("--prefix-cache-bytes", o->env.prefix_cache_bytes,
                  "KV bytes of prompt prefixes cached for requests without an agent (per-tenant "
                  "radix tree, LRU); 0 disables")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-running", o->max_running,
                  "generation requests running at once (one per agent)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-queue", o->max_queue,
                  "generation requests waiting beyond --max-running, taken round-robin by "
                  "tenant then agent; more get 429 (OpenAI) / 529 (Anthropic) with Retry-After")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--request-timeout", o->request_timeout_s,
                  "seconds a request's headers and body may take to arrive; then 408 and the "
                  "connection is closed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-client-connections", o->max_client_connections,
                  "connections one client address may hold open; more get 503 with Retry-After")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--accept-queue", o->accept_queue,
                  "complete requests that may wait for a free HTTP thread; more get 503 with "
                  "Retry-After")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o] { throw CLI::RuntimeError(Run(*o)); });
}

}  // namespace kvmem::app
