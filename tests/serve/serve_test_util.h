// Helpers for the serve tests: a server on an ephemeral port over a FakeBackend, request
// shortcuts, and a Server-Sent Events parser that follows the WHATWG algorithm the official
// openai/anthropic Python clients implement (field "event"/"data", one space after the colon
// stripped, a blank line dispatches), strict about framing: the body must end with a blank line.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "fake_backend.h"
#include "serve/http_server.h"
#include "serve/request_fields.h"

namespace kvmem::serve::testing {

// The request context the parser tests use: tenant "t1", no agent header, a 4096-token model.
inline RequestContext Ctx() {
  return RequestContext{.tenant = "t1",
                        .header_agent_id = std::nullopt,
                        .model = ModelInfo{.name = "fake-model", .context_length = 4096}};
}

using Json = nlohmann::json;

struct SseEvent {
  std::string event;  // "" when the event had no event: line
  std::string data;
};

// Every event of `body`; an ADD_FAILURE for a body that does not end in a blank line or holds
// a line other than event:/data: (the servers never send comments, ids or retry fields).
inline std::vector<SseEvent> ParseSse(std::string_view body) {
  std::vector<SseEvent> events;
  SseEvent current;
  bool has_fields = false;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t eol = body.find('\n', pos);
    if (eol == std::string_view::npos) {
      ADD_FAILURE() << "SSE body does not end with a newline: " << body.substr(pos);
      break;
    }
    std::string_view line = body.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty()) {
      if (has_fields) events.push_back(current);
      current = SseEvent();
      has_fields = false;
      continue;
    }
    const size_t colon = line.find(':');
    std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    if (field == "event") {
      current.event = value;
    } else if (field == "data") {
      if (!current.data.empty()) current.data += "\n";
      current.data += value;
    } else {
      ADD_FAILURE() << "unexpected SSE line: " << line;
    }
    has_fields = true;
  }
  if (has_fields) ADD_FAILURE() << "SSE body ends inside an event";
  return events;
}

// The text of a stream, whatever way the server split it into events: the content deltas of
// OpenAI chat chunks, the text of completion chunks, or Anthropic's text_delta events.
inline std::string StreamText(const std::vector<SseEvent>& events) {
  std::string text;
  for (const SseEvent& e : events) {
    if (e.data == "[DONE]") continue;
    const nlohmann::json d = nlohmann::json::parse(e.data);
    if (e.event == "content_block_delta") {
      text += d["delta"]["text"].get<std::string>();
    } else if (e.event.empty() && d.contains("choices") && !d["choices"].empty()) {
      const nlohmann::json& c = d["choices"][0];
      if (c.contains("delta") && c["delta"].contains("content")) {
        text += c["delta"]["content"].get<std::string>();
      } else if (c.contains("text")) {
        text += c["text"].get<std::string>();
      }
    }
  }
  return text;
}

// A running HttpServer over a FakeBackend.
class ServerFixture {
 public:
  explicit ServerFixture(HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(&backend_, std::move(options));
    const Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  FakeBackend& backend() { return backend_; }
  HttpServer& server() { return *server_; }
  int port() const { return server_->port(); }

  std::unique_ptr<httplib::Client> Client() const {
    auto cli = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    cli->set_read_timeout(20, 0);
    cli->set_write_timeout(20, 0);
    return cli;
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       httplib::Headers headers = {}) const {
    return Client()->Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result Get(const std::string& path, httplib::Headers headers = {}) const {
    return Client()->Get(path.c_str(), headers);
  }
  httplib::Result Delete(const std::string& path, httplib::Headers headers = {}) const {
    return Client()->Delete(path.c_str(), headers);
  }

 private:
  FakeBackend backend_;  // outlives the server
  std::unique_ptr<HttpServer> server_;
};

inline Json ParseJson(const std::string& body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << body;
  return j;
}

// {"model":"m","messages":[{"role":"user","content": content}]} plus `extra` fields.
inline std::string ChatBody(const std::string& content, const Json& extra = Json::object()) {
  Json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", content}}}}};
  body.update(extra);
  return body.dump();
}

// The same for Anthropic, with max_tokens 100 unless `extra` sets it.
inline std::string MessagesBody(const std::string& content, const Json& extra = Json::object()) {
  Json body = {{"model", "m"},
               {"max_tokens", 100},
               {"messages", {{{"role", "user"}, {"content", content}}}}};
  body.update(extra);
  return body.dump();
}

}  // namespace kvmem::serve::testing
