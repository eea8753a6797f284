#include "scenario/http_client.h"

#include <chrono>
#include <optional>

#include "httplib.h"

namespace kvmem::scenario {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTimeoutS = 600;  // a turn of a long scenario on a slow CPU

// The error message of a kvmem error body, or the body itself.
std::string ErrorText(int status, const std::string& body) {
  std::string message = body;
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].value("message", Json()).is_string()) {
    message = j["error"]["message"].get<std::string>();
  }
  return "HTTP " + std::to_string(status) + ": " + message;
}

Status HttpStatus(int status, const std::string& body) {
  const std::string text = ErrorText(status, body);
  if (status == 404) return NotFound(text);
  if (status == 409) return FailedPrecondition(text);
  if (status == 429 || status == 503) return Unavailable(text);
  if (status == 401 || status == 403) return Unauthenticated(text);
  return InvalidArgument(text);
}

// Reads the server-sent events of a chat completion stream as they arrive.
class StreamReader {
 public:
  explicit StreamReader(Clock::time_point start) : start_(start) {}

  // False on an error event or an unreadable one.
  bool Feed(const char* data, size_t n) {
    buffer_.append(data, n);
    for (size_t end; (end = buffer_.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      if (!Event(event)) return false;
    }
    return true;
  }

  Status Finish(ChatReply* reply) {
    if (!error_.empty()) return Unavailable("the stream ended with an error: " + error_);
    if (!usage_) return Internal("the stream ended without usage");
    reply->text = std::move(text_);
    reply->prompt_tokens = usage_->value("prompt_tokens", int64_t{0});
    reply->cached_tokens = (*usage_)["prompt_tokens_details"].value("cached_tokens", int64_t{0});
    reply->ttft_ms = first_text_ms_ >= 0 ? first_text_ms_ : since_start_ms();
    return Status::Ok();
  }

 private:
  double since_start_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }

  bool Event(const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return true;  // comments, keep-alives
    const std::string data = event.substr(6);
    if (data == "[DONE]") return true;
    Json j = Json::parse(data, nullptr, false);
    if (!j.is_object()) {
      error_ = "unreadable event";
      return false;
    }
    if (j.contains("error")) {
      error_ = j["error"].is_object() ? j["error"].value("message", "error") : "error";
      return false;
    }
    if (j.contains("usage") && j["usage"].is_object()) usage_ = j["usage"];
    if (!j.contains("choices") || !j["choices"].is_array()) return true;
    for (const Json& choice : j["choices"]) {
      const Json delta = choice.value("delta", Json::object());
      if (!delta.is_object() || !delta.contains("content") || !delta["content"].is_string())
        continue;
      const std::string piece = delta["content"].get<std::string>();
      if (!piece.empty() && first_text_ms_ < 0) first_text_ms_ = since_start_ms();
      text_ += piece;
    }
    return true;
  }

  Clock::time_point start_;
  std::string buffer_;
  std::string text_;
  std::string error_;
  std::optional<Json> usage_;
  double first_text_ms_ = -1;
};

}  // namespace

std::string AgentPath(const std::string& id) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "/v1/agents/";
  for (unsigned char c : id) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<HttpScenarioClient> HttpScenarioClient::Create(const std::string& base_url,
                                                      std::string api_key) {
  if (base_url.rfind("http://", 0) != 0 || base_url.size() <= 7) {
    return InvalidArgument("server URL '" + base_url + "' must be http://HOST[:PORT]");
  }
  std::string url = base_url;
  while (url.size() > 7 && url.back() == '/') url.pop_back();
  return HttpScenarioClient(std::move(url), std::move(api_key));
}

namespace {

struct Connection {
  httplib::Client cli;
  httplib::Headers headers;
  Connection(const std::string& url, const std::string& key) : cli(url) {
    cli.set_connection_timeout(10);
    cli.set_read_timeout(kTimeoutS);
    cli.set_write_timeout(kTimeoutS);
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  }
};

Status Unreachable(const std::string& url, httplib::Error e) {
  return Unavailable("cannot reach " + url + ": " + httplib::to_string(e));
}

}  // namespace

Result<AgentOpened> HttpScenarioClient::OpenAgent(const std::string& id, const Json& memory,
                                                  bool server_conversation) {
  Connection c(base_url_, api_key_);
  const std::string conversation = server_conversation ? "server" : "client";
  Json body = {{"id", id}, {"conversation", conversation}};
  if (!memory.is_null()) body["memory"] = memory;
  auto res = c.cli.Post("/v1/agents", c.headers, body.dump(), "application/json");
  if (!res) return Unreachable(base_url_, res.error());
  if (res->status == 200 || res->status == 201) return AgentOpened{};
  if (res->status != 409) return HttpStatus(res->status, res->body);
  auto got = c.cli.Get(AgentPath(id), c.headers);
  if (!got) return Unreachable(base_url_, got.error());
  if (got->status != 200) return HttpStatus(got->status, got->body);
  Json j = Json::parse(got->body, nullptr, false);
  if (!j.is_object()) return Internal("GET " + AgentPath(id) + ": not a JSON object");
  if (j.value("conversation", std::string()) != conversation) {
    return FailedPrecondition("agent '" + id + "' exists with a " +
                              j.value("conversation", std::string("client")) +
                              "-side conversation; delete it to run this scenario");
  }
  AgentOpened opened;
  opened.existed = true;
  opened.cached_tokens = j.value("cached_tokens", int64_t{0});
  return opened;
}

Status HttpScenarioClient::DeleteAgent(const std::string& id) {
  Connection c(base_url_, api_key_);
  auto res = c.cli.Delete(AgentPath(id), c.headers);
  if (!res) return Unreachable(base_url_, res.error());
  if (res->status == 200 || res->status == 204 || res->status == 404) return Status::Ok();
  return HttpStatus(res->status, res->body);
}

Result<ChatReply> HttpScenarioClient::Chat(const std::string& id,
                                           const std::vector<ChatMessage>& messages, int max_tokens,
                                           double temperature) {
  Json msgs = Json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  const Json body = {{"messages", std::move(msgs)},
                     {"user", id},
                     {"max_tokens", max_tokens},
                     {"temperature", temperature},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  Connection c(base_url_, api_key_);
  const Clock::time_point start = Clock::now();
  StreamReader reader(start);
  std::string error_body;
  int status = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = c.headers;
  req.headers.emplace("Content-Type", "application/json");
  req.body = body.dump();
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    return reader.Feed(data, n);
  };
  auto res = c.cli.send(req);
  if (status != 0 && status != 200) return HttpStatus(status, error_body);
  if (!res && res.error() != httplib::Error::Canceled) return Unreachable(base_url_, res.error());
  ChatReply reply;
  KVMEM_RETURN_IF_ERROR(reader.Finish(&reply));
  return reply;
}

}  // namespace kvmem::scenario
