#include "serve/http_server.h"

#include <httplib.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>

#include "core/log.h"
#include "core/utf8.h"
#include "serve/agent_path.h"
#include "serve/agents_api.h"
#include "serve/anthropic_api.h"
#include "serve/api_error.h"
#include "serve/embeddings_api.h"
#include "serve/generation_route.h"
#include "serve/http_reply.h"
#include "serve/inspector_api.h"
#include "serve/openai_api.h"
#include "serve/responses_api.h"
#include "serve/tokenize_api.h"
#include "serve/ui_assets.h"

namespace kvmem::serve {
namespace {

// Responses on /v1/messages speak Anthropic; everything else OpenAI.
Dialect DialectOfPath(std::string_view path) {
  return path.starts_with("/v1/messages") ? Dialect::kAnthropic : Dialect::kOpenAi;
}

// The metrics label of a request: its route pattern, so label values stay few whatever paths
// clients send.
std::string EndpointLabel(std::string_view path) {
  for (std::string_view route :
       {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
        "/v1/embeddings", "/tokenize", "/detokenize", "/v1/models", "/v1/agents", "/v1/policies",
        "/v1/responses", "/health", "/metrics"}) {
    if (path == route) return std::string(route);
  }
  if (path.starts_with("/v1/agents/")) return "/v1/agents/{id}";
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  if (path.starts_with("/v1/responses/")) return "/v1/responses/{id}";
  if (path == "/ui" || path.starts_with("/ui/")) return "/ui";
  return "other";
}

// The time taken depends on the presented key's length only, never on where it first differs
// from the expected one, so timing cannot reveal a key prefix by prefix.
bool KeyEquals(std::string_view presented, std::string_view expected) {
  unsigned diff = presented.size() != expected.size() ? 1 : 0;
  for (size_t i = 0; i < presented.size(); ++i) {
    const char e = i < expected.size() ? expected[i] : 0;
    diff |= static_cast<unsigned char>(presented[i] ^ e);
  }
  return diff == 0;
}

// The message of an error the HTTP library raised before any handler ran.
std::string LibraryErrorMessage(const httplib::Request& req, int status) {
  switch (status) {
    case 404:
      return "no route for " + req.method + " " + req.path;
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    case 416:
      return "invalid Range header";
    case 400:
      return "malformed HTTP request";
    default:
      break;
  }
  return "HTTP error " + std::to_string(status);
}

// GET /ui and /ui/{file}: the embedded page, which may load only its own files and call only
// this server (no inline script, so text an agent wrote can never run as code).
void ServeUiAsset(const httplib::Request& req, httplib::Response& res) {
  const UiAsset* asset = FindUiAsset(req.path);
  if (asset == nullptr) {
    return SendError(res, {ApiErrorKind::kNotFound, LibraryErrorMessage(req, 404)},
                     Dialect::kOpenAi);
  }
  res.status = 200;
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  res.set_content(std::string(asset->body), std::string(asset->content_type));
}

// The key a request presents: `Authorization: Bearer KEY` or `x-api-key: KEY`.
std::optional<std::string> PresentedKey(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() > 7 && strncasecmp(auth.c_str(), "Bearer ", 7) == 0) return auth.substr(7);
  if (req.has_header("x-api-key")) return req.get_header_value("x-api-key");
  return std::nullopt;
}

// httplib's view of a FrontConnection: reads from what the front end read ahead, then the
// socket under the request's deadline; writes wait at most write_timeout per blocked send.
class FrontStream final : public httplib::Stream {
 public:
  FrontStream(FrontConnection* c, std::chrono::milliseconds write_timeout)
      : c_(c), write_timeout_(write_timeout) {}

  bool is_readable() const override { return c_->Readable(); }
  bool is_writable() const override { return c_->Writable(write_timeout_); }
  ssize_t read(char* ptr, size_t size) override { return c_->Read(ptr, size); }
  ssize_t write(const char* ptr, size_t size) override {
    return c_->Write(ptr, size, write_timeout_);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    SocketEnd(c_->fd(), /*peer=*/true, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    SocketEnd(c_->fd(), /*peer=*/false, &ip, &port);
  }
  socket_t socket() const override { return c_->fd(); }

 private:
  FrontConnection* c_;
  std::chrono::milliseconds write_timeout_;
};

}  // namespace

// The library's routing and response writing, run on one request of a front-end connection
// (its own accept loop and listener are never started).
class HttpServer::Router : public httplib::Server {
 public:
  // The library ends every content provider (streams) once svr_sock_ is invalid, its sign of a
  // stopping listener; that listener is never opened here, so it is marked valid for good.
  // Stop() ends streams itself (cancel_all_). The value is never used as a socket: the library
  // closes it only in stop() and its accept loop, which never run.
  Router() { svr_sock_ = 0; }

  // Whether the connection may carry another request.
  bool Serve(httplib::Stream& stream, bool last) {
    bool closed = false;
    return process_request(stream, last, closed, nullptr) && !closed;
  }
};

// The route handlers. Each runs on an HTTP worker thread. Every handler reads the request
// body itself through the library's content reader, bounded by max_body_bytes whatever the
// transfer encoding (chunked) or content encoding (gzip): the library's own limit covers only
// Content-Length. Exceptions are caught here and become 500s, since nothing a client sends
// should throw (parsers return Status).
class HttpServer::Handlers {
 public:
  explicit Handlers(HttpServer* server)
      : s_(server),
        generation_{.backend = server->backend_,
                    .metrics = &server->metrics_,
                    .admission = server->admission_.get(),
                    .in_flight = &server->in_flight_,
                    .stopping = &server->stopping_,
                    .cancel_all = &server->cancel_all_} {}

  void Register(httplib::Server& http) {
    http.Post("/v1/chat/completions", WithBody(kKey, Generation(&ParseChatCompletionRequest)));
    http.Post("/v1/completions", WithBody(kKey, Generation(&ParseCompletionRequest)));
    http.Post("/v1/messages", WithBody(kKey, Generation(&ParseMessagesRequest)));
    http.Post("/v1/responses",
              WithBody(kKey, [this](auto& req, auto& res, auto& tenant, auto body) {
                ServeResponseCreate(generation_, req, body, res, tenant);
              }));
    const Route response_by_id = [this](auto& req, auto& res, auto& tenant, auto) {
      ServeResponseById(*s_->backend_, req, res, tenant);
    };
    http.Get("/v1/responses/(.+)", NoBody(kKey, response_by_id));
    http.Delete("/v1/responses/(.+)", WithBody(kKey, response_by_id));
    http.Get("/v1/models", NoBody(kKey, [this](auto& req, auto& res, auto&, auto) {
               const ModelInfo model = s_->backend_->model();
               SendJson(res, req.has_header("anthropic-version") ? AnthropicModelList(model)
                                                                 : OpenAiModelList(model));
             }));
    http.Get("/v1/models/(.+)", NoBody(kKey, [this](auto& req, auto& res, auto&, auto) {
               const ModelInfo model = s_->backend_->model();
               if (req.matches[1] != model.name) {
                 return SendError(
                     res,
                     {ApiErrorKind::kNotFound, "no model named '" + req.matches[1].str() + "'"},
                     Dialect::kOpenAi);
               }
               SendJson(res, req.has_header("anthropic-version") ? AnthropicModel(model)
                                                                 : OpenAiModel(model));
             }));
    http.Get("/v1/policies", NoBody(kKey, [this](auto&, auto& res, auto&, auto) {
               SendJson(res, s_->backend_->Policies().dump(
                                 -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
             }));
    http.Post("/v1/agents", WithBody(kKey, [this](auto&, auto& res, auto& tenant, auto body) {
                auto request = ParseAgentCreateRequest(body);
                if (!request.ok()) return SendStatus(res, request.status(), Dialect::kOpenAi);
                auto agent = s_->backend_->CreateAgent(tenant, *request);
                if (!agent.ok()) return SendStatus(res, agent.status(), Dialect::kOpenAi);
                SendJson(res, AgentJson(*agent));
              }));
    http.Get("/v1/agents", NoBody(kKey, [this](auto&, auto& res, auto& tenant, auto) {
               auto agents = s_->backend_->ListAgents(tenant);
               if (!agents.ok()) return SendStatus(res, agents.status(), Dialect::kOpenAi);
               SendJson(res, AgentListJson(std::move(agents).value()));
             }));
    // Every method goes to Agent(), which reads the id from the raw target and answers the 405s.
    http.Get("/v1/agents/(.+)", NoBody(kKey, Agent()));
    http.Post("/v1/agents/(.+)", WithBody(kKey, Agent()));
    http.Delete("/v1/agents/(.+)", WithBody(kKey, Agent()));
    http.Put("/v1/agents/(.+)", WithBody(kKey, Agent()));
    http.Patch("/v1/agents/(.+)", WithBody(kKey, Agent()));
    http.Post("/v1/messages/count_tokens",
              WithBody(kKey, [this](auto&, auto& res, auto& tenant, auto body) {
                RequestContext ctx{.tenant = tenant, .header_agent_id = {},
                                   .model = s_->backend_->model()};
                auto request = ParseCountTokensRequest(body, ctx);
                if (!request.ok()) return SendStatus(res, request.status(), Dialect::kAnthropic);
                auto n = s_->backend_->CountPromptTokens(*request);
                if (!n.ok()) return SendStatus(res, n.status(), Dialect::kAnthropic);
                SendJson(res, CountTokensJson(*n));
              }));
    http.Post("/v1/embeddings", WithBody(kKey, [this](auto&, auto& res, auto&, auto body) {
                auto request = ParseEmbeddingsRequest(body);
                if (!request.ok()) return SendStatus(res, request.status(), Dialect::kOpenAi);
                const ModelInfo model = s_->backend_->model();
                Status usable = CheckEmbeddingsModel(*request, model);
                if (!usable.ok()) return SendStatus(res, usable, Dialect::kOpenAi);
                auto embeddings = s_->backend_->Embed(request->texts);
                if (!embeddings.ok()) return SendStatus(res, embeddings.status(), Dialect::kOpenAi);
                SendJson(res, EmbeddingsJson(*embeddings, model, request->base64));
              }));
    http.Post("/tokenize", WithBody(kKey, [this](auto&, auto& res, auto&, auto body) {
                auto request = ParseTokenizeRequest(body);
                if (!request.ok()) return SendStatus(res, request.status(), Dialect::kOpenAi);
                SendJson(res, TokenizeJson(s_->backend_->Tokenize(request->content,
                                                                  request->add_special,
                                                                  request->parse_special),
                                           request->with_pieces));
              }));
    http.Post("/detokenize", WithBody(kKey, [this](auto&, auto& res, auto&, auto body) {
                auto ids = ParseDetokenizeRequest(body);
                if (!ids.ok()) return SendStatus(res, ids.status(), Dialect::kOpenAi);
                auto text = s_->backend_->Detokenize(*ids);
                if (!text.ok()) return SendStatus(res, text.status(), Dialect::kOpenAi);
                SendJson(res, DetokenizeJson(*text));
              }));
    http.Options(".*", [this](const httplib::Request& req, httplib::Response& res) {
      Preflight(req, res);
    });
    http.Get("/health", NoBody(kOpen, [this](auto&, auto& res, auto&, auto) {
               if (s_->stopping_.load()) {
                 res.status = 503;
                 res.set_content(R"({"status":"stopping"})", "application/json");
                 return;
               }
               SendJson(res, R"({"status":"ok"})");
             }));
    http.Get("/metrics", NoBody(kKey, [this](auto&, auto& res, auto&, auto) {
               res.status = 200;
               res.set_content(s_->metrics_.Render(s_->backend_->stats(), s_->admission(),
                                                   s_->in_flight_.load(), s_->connections()),
                               "text/plain; version=0.0.4; charset=utf-8");
             }));
    // The inspector's page (ui_assets.h): static files holding no data, so open like /health;
    // what it shows comes from the API calls it makes with the key the user gives it.
    const Route page = [](const httplib::Request& req, httplib::Response& res,
                          const std::string&, std::string_view) { ServeUiAsset(req, res); };
    http.Get("/ui", NoBody(kOpen, page));
    http.Get("/ui/(.*)", NoBody(kOpen, page));
    RegisterMethodNotAllowed(http);
    // Last, so they only catch what no route matched: unknown paths with a body still have it
    // read within the limit before the 404.
    const auto no_route = WithBody(kOpen, [](auto& req, auto& res, auto&, auto) {
      SendError(res, {ApiErrorKind::kNotFound, LibraryErrorMessage(req, 404)},
                DialectOfPath(req.path));
    });
    http.Post(".*", no_route);
    http.Put(".*", no_route);
    http.Patch(".*", no_route);
    http.Delete(".*", no_route);
  }

 private:
  enum Access { kOpen, kKey };
  // A route's work once its body is read and its key checked (tenant: the key's, or
  // kDefaultTenant without keys).
  using Route = std::function<void(const httplib::Request&, httplib::Response&,
                                   const std::string& tenant, std::string_view body)>;

  httplib::Server::Handler NoBody(Access access, Route route) {
    return [this, access, route = std::move(route)](const httplib::Request& req,
                                                    httplib::Response& res) {
      Guard(req, res, [&] { Dispatch(access, route, req, res, {}); });
    };
  }

  httplib::Server::HandlerWithContentReader WithBody(Access access, Route route) {
    return [this, access, route = std::move(route)](const httplib::Request& req,
                                                    httplib::Response& res,
                                                    const httplib::ContentReader& reader) {
      Guard(req, res, [&] {
        std::string body;
        if (ReadBody(req, res, reader, &body)) Dispatch(access, route, req, res, body);
      });
    };
  }

  // Runs `fn`, turning exceptions into 500s, then counts the response before it is written
  // (so a client that has its reply sees it counted in /metrics).
  void Guard(const httplib::Request& req, httplib::Response& res, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      KVMEM_LOG_ERROR("%s %s: exception: %s", req.method.c_str(), req.path.c_str(), e.what());
      SendError(res, {ApiErrorKind::kInternal, "internal server error"}, DialectOfPath(req.path));
    } catch (...) {
      KVMEM_LOG_ERROR("%s %s: unknown exception", req.method.c_str(), req.path.c_str());
      SendError(res, {ApiErrorKind::kInternal, "internal server error"}, DialectOfPath(req.path));
    }
    s_->metrics_.CountRequest(EndpointLabel(req.path), res.status);
  }

  // The whole body into *body; false (with the error response written) when it is larger than
  // max_body_bytes or cannot be read. Past the limit the rest is read and dropped, up to
  // kDrainBytes more, so the client (still sending) gets its 413 on a connection in step;
  // beyond that the connection is closed.
  bool ReadBody(const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader, std::string* body) {
    static constexpr size_t kDrainBytes = size_t{16} << 20;
    const size_t max = s_->options_.max_body_bytes;
    size_t seen = 0;
    bool too_large = false;
    const bool read = reader([&](const char* data, size_t n) {
      seen += n;
      if (seen > max) {
        too_large = true;
        body->clear();
        return seen - max <= kDrainBytes;
      }
      body->append(data, n);
      return true;
    });
    if (!read) res.set_header("Connection", "close");
    if (too_large || res.status == 413) {  // 413: the library refused the Content-Length
      SendError(res,
                {ApiErrorKind::kRequestTooLarge,
                 "request body is larger than " + std::to_string(max) + " bytes"},
                DialectOfPath(req.path));
      return false;
    }
    if (!read) {
      SendError(res, {ApiErrorKind::kInvalidRequest, "could not read the request body"},
                DialectOfPath(req.path));
      return false;
    }
    return true;
  }

  void Dispatch(Access access, const Route& route, const httplib::Request& req,
                httplib::Response& res, std::string_view body) {
    if (req.has_header("Origin")) {
      const std::string origin = req.get_header_value("Origin");
      if (!s_->cors_.Allows(origin, req.get_header_value("Host"))) {
        return SendError(res,
                         {ApiErrorKind::kPermission, "browser origin " + Quoted(origin) +
                                                         " is not allowed; start kvmem serve with "
                                                         "--cors-origin " + Quoted(origin)},
                         DialectOfPath(req.path));
      }
    }
    const std::vector<ApiKey>& keys = s_->options_.api_keys;
    if (access == kOpen || keys.empty()) return route(req, res, kDefaultTenant, body);
    const std::optional<std::string> key = PresentedKey(req);
    if (!key) {
      return SendError(res,
                       {ApiErrorKind::kAuthentication,
                        "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"},
                       DialectOfPath(req.path));
    }
    for (const ApiKey& k : keys) {
      if (KeyEquals(*key, k.key)) return route(req, res, k.tenant, body);
    }
    SendError(res, {ApiErrorKind::kAuthentication, "invalid API key"}, DialectOfPath(req.path));
  }

  // GET|DELETE /v1/agents/{id}, POST /v1/agents/{id}/rebuild, the inspector's GET
  // /v1/agents/{id}/memory and /turns, GET .../segments and PUT|DELETE .../segments/{name}
  // (agent_path.h).
  Route Agent() {
    return [this](const httplib::Request& req, httplib::Response& res, const std::string& tenant,
                  std::string_view body) {
      Result<AgentPath> path = ParseAgentPath(req.target);
      if (!path.ok() && path.status().code() == ErrorCode::kNotFound) {
        return SendError(res, {ApiErrorKind::kNotFound, LibraryErrorMessage(req, 404)},
                         Dialect::kOpenAi);
      }
      if (!path.ok()) return SendStatus(res, path.status(), Dialect::kOpenAi);
      const std::string& id = path->id;
      const AgentResource what = path->resource;
      const char* allow = what == AgentResource::kRebuild   ? "POST"
                          : what == AgentResource::kAgent   ? "GET, DELETE"
                          : what == AgentResource::kSegment ? "PUT, DELETE"
                                                            : "GET";
      if ((what == AgentResource::kSegments || what == AgentResource::kSegment) &&
          Segments(req, res, tenant, *path, body)) {
        return;
      }
      if (what == AgentResource::kRebuild && req.method == "POST") {
        auto done = s_->backend_->RebuildAgent(tenant, id);
        if (!done.ok()) return SendStatus(res, done.status(), Dialect::kOpenAi);
        return SendJson(res,
                        DumpJson({{"id", id}, {"object", "agent.rebuild"}, {"rebuild", *done}}));
      }
      if (what == AgentResource::kMemory && req.method == "GET") {
        auto memory = s_->backend_->InspectAgent(tenant, id);
        if (!memory.ok()) return SendStatus(res, memory.status(), Dialect::kOpenAi);
        return SendJson(res, AgentMemoryJson(id, *memory));
      }
      if (what == AgentResource::kTurns && req.method == "GET") {
        auto turns = s_->backend_->AgentTurns(tenant, id);
        if (!turns.ok()) return SendStatus(res, turns.status(), Dialect::kOpenAi);
        return SendJson(res, AgentTurnsJson(id, *turns));
      }
      if (what == AgentResource::kAgent && req.method == "GET") {
        auto agent = s_->backend_->GetAgent(tenant, id);
        if (!agent.ok()) return SendStatus(res, agent.status(), Dialect::kOpenAi);
        return SendJson(res, AgentJson(*agent));
      }
      if (what == AgentResource::kAgent && req.method == "DELETE") {
        Status status = s_->backend_->DeleteAgent(tenant, id);
        if (!status.ok()) return SendStatus(res, status, Dialect::kOpenAi);
        return SendJson(res, AgentDeletedJson(id));
      }
      res.set_header("Allow", allow);
      SendError(res,
                {ApiErrorKind::kMethodNotAllowed, "method " + req.method + " is not allowed on " +
                                                      req.path + " (allowed: " + allow + ")"},
                Dialect::kOpenAi);
    };
  }

  // The segment routes (agents_api.h); false for a method the route does not have.
  bool Segments(const httplib::Request& req, httplib::Response& res, const std::string& tenant,
                const AgentPath& path, std::string_view body) {
    using Op = memory::SegmentRequest::Op;
    memory::SegmentRequest r;
    if (path.resource == AgentResource::kSegments && req.method == "GET") {
      r.op = Op::kList;
    } else if (path.resource == AgentResource::kSegment && req.method == "PUT") {
      r.op = Op::kPut;
      r.name = path.segment;
      Result<std::string> text = ParseSegmentPutRequest(body);
      if (!text.ok()) {
        SendStatus(res, text.status(), Dialect::kOpenAi);
        return true;
      }
      r.text = std::move(*text);
    } else if (path.resource == AgentResource::kSegment && req.method == "DELETE") {
      r.op = Op::kDelete;
      r.name = path.segment;
    } else {
      return false;
    }
    Result<Json> done = s_->backend_->AgentSegments(tenant, path.id, r);
    if (!done.ok()) {
      SendStatus(res, done.status(), Dialect::kOpenAi);
      return true;
    }
    SendJson(res, r.op == Op::kList  ? SegmentListJson(*done)
                  : r.op == Op::kPut ? SegmentJson(*done)
                                     : SegmentDeletedJson(r.name));
    return true;
  }

  // A CORS preflight (cors.h). Access-Control-Allow-Origin itself is added to every response to
  // a granted origin by the post-routing handler (HttpServer::Start).
  void Preflight(const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    res.set_header("Allow", CorsPolicy::kAllowMethods);
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || !req.has_header("Access-Control-Request-Method") ||
        !s_->cors_.Grants(origin)) {
      return;  // no Access-Control-Allow-*: the browser refuses the call
    }
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Methods", CorsPolicy::kAllowMethods);
    res.set_header("Access-Control-Allow-Headers",
                   asked.empty() ? CorsPolicy::kAllowHeaders : asked);
    res.set_header("Access-Control-Max-Age", CorsPolicy::kMaxAgeSeconds);
  }

  Route Generation(RequestParser parse) {
    return [this, parse](const httplib::Request& req, httplib::Response& res,
                         const std::string& tenant, std::string_view body) {
      ServeGeneration(generation_, DialectOfPath(req.path), parse, req, body, res, tenant);
    };
  }

  // 405 for known paths with the wrong method, instead of the library's 404.
  void RegisterMethodNotAllowed(httplib::Server& http) {
    struct Path {
      const char* pattern;
      bool get, post, del;
    };
    const Path paths[] = {
        {"/v1/chat/completions", false, true, false},
        {"/v1/completions", false, true, false},
        {"/v1/messages", false, true, false},
        {"/v1/responses", false, true, false},
        {"/v1/models", true, false, false},
        {"/v1/models/(.+)", true, false, false},
        {"/v1/messages/count_tokens", false, true, false},
        {"/v1/embeddings", false, true, false},
        {"/tokenize", false, true, false},
        {"/detokenize", false, true, false},
        {"/v1/agents", true, true, false},
        {"/v1/policies", true, false, false},
        {"/health", true, false, false},
        {"/metrics", true, false, false},
    };
    for (const Path& p : paths) {
      std::string allow = p.get ? "GET" : "";
      if (p.post) allow += allow.empty() ? "POST" : ", POST";
      if (p.del) allow += allow.empty() ? "DELETE" : ", DELETE";
      const Route refuse = [allow](const httplib::Request& req, httplib::Response& res,
                                   const std::string&, std::string_view) {
        res.set_header("Allow", allow);
        SendError(res,
                  {ApiErrorKind::kMethodNotAllowed, "method " + req.method + " is not allowed on " +
                                                        req.path + " (allowed: " + allow + ")"},
                  DialectOfPath(req.path));
      };
      if (!p.get) http.Get(p.pattern, NoBody(kOpen, refuse));
      if (!p.post) http.Post(p.pattern, WithBody(kOpen, refuse));
      if (!p.del) http.Delete(p.pattern, WithBody(kOpen, refuse));
      http.Put(p.pattern, WithBody(kOpen, refuse));
      http.Patch(p.pattern, WithBody(kOpen, refuse));
    }
  }

  HttpServer* s_;
  GenerationContext generation_;
};

HttpServer::HttpServer(Backend* backend, HttpServerOptions options)
    : backend_(backend), options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

AdmissionCounts HttpServer::admission() const {
  return admission_ ? admission_->counts() : AdmissionCounts{};
}

Status HttpServer::Start() {
  if (started_) return InvalidArgument("server already started");
  if (options_.max_running < 1 || options_.max_queue < 0) {
    return InvalidArgument("max_running must be at least 1 and max_queue at least 0");
  }
  if (options_.threads < 0 || options_.max_body_bytes == 0) {
    return InvalidArgument("threads must be >= 0 and max_body_bytes > 0");
  }
  if (options_.accept_queue < 0 || options_.max_client_connections < 1 ||
      options_.request_timeout_s < 1 || options_.keep_alive_timeout_s < 1) {
    return InvalidArgument(
        "accept_queue must be >= 0, max_client_connections and the timeouts at least 1");
  }
  for (const ApiKey& k : options_.api_keys) {
    if (k.key.empty() || k.tenant.empty()) {
      return InvalidArgument("API keys and their tenants must not be empty");
    }
  }
  const size_t threads = options_.threads > 0
                             ? static_cast<size_t>(options_.threads)
                             : static_cast<size_t>(options_.max_running) +
                                   static_cast<size_t>(options_.max_queue) + 16;
  admission_ = std::make_unique<Admission>(
      AdmissionLimits{.max_running = options_.max_running, .max_queue = options_.max_queue});

  http_ = std::make_unique<Router>();
  http_->set_payload_max_length(options_.max_body_bytes);
  // Errors the library raises itself (no GET route, malformed request, URI too long) get a
  // body in the route's dialect and are counted here; responses our handlers wrote already
  // have a body and were counted by Handlers::Guard.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        metrics_.CountRequest(EndpointLabel(req.path), res.status);
        const Dialect dialect = DialectOfPath(req.path);
        const ApiErrorKind kind = ApiErrorKindFromHttpStatus(res.status);
        res.set_content(ErrorBody({kind, LibraryErrorMessage(req, res.status)}, dialect),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  cors_ = CorsPolicy(options_.cors_origins);
  http_->set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty() || !cors_.Grants(origin)) return;
    res.set_header("Access-Control-Allow-Origin", cors_.AllowOriginValue(origin));
    res.set_header("Access-Control-Expose-Headers", "Retry-After, X-Kvmem-Divergence");
    res.set_header("Vary", "Origin");
  });
  handlers_ = std::make_unique<Handlers>(this);
  handlers_->Register(*http_);

  HttpFrontOptions front{.host = options_.host,
                         .port = options_.port,
                         .workers = static_cast<int>(threads),
                         .accept_queue = options_.accept_queue,
                         .max_client_connections = options_.max_client_connections,
                         .request_timeout = std::chrono::seconds(options_.request_timeout_s),
                         .keep_alive_timeout = std::chrono::seconds(options_.keep_alive_timeout_s),
                         .write_timeout = std::chrono::seconds(options_.write_timeout_s),
                         .framing = {.max_body_bytes = options_.max_body_bytes}};
  const std::chrono::milliseconds write_timeout = front.write_timeout;
  front_ = std::make_unique<HttpFront>(std::move(front),
                                       [this, write_timeout](FrontConnection& c, bool last) {
                                         FrontStream stream(&c, write_timeout);
                                         return http_->Serve(stream, last);
                                       });
  KVMEM_RETURN_IF_ERROR(front_->Start());
  port_ = front_->port();
  started_ = true;
  KVMEM_LOG_INFO("serving on http://%s:%d", options_.host.c_str(), port_);
  return Status::Ok();
}

namespace {

// Polls until nothing is in flight or `timeout` has passed.
void WaitIdle(const std::atomic<int64_t>& in_flight, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

// The listener stays open while generations drain: new ones get a clean 503/529 (and /health
// says "stopping", so a load balancer moves on) instead of a refused connection. It closes
// only once the admitted streams have written their last event.
void HttpServer::Stop() {
  if (!started_) return;
  started_ = false;
  stopping_ = true;
  WaitIdle(in_flight_, options_.shutdown_grace);
  cancel_all_ = true;  // the rest stop at their next token, streams end with an error event
  WaitIdle(in_flight_, std::chrono::seconds(5));
  front_->Stop();  // closes idle connections, ends the others after their current request
}

}  // namespace kvmem::serve
