// Anthropic response objects: the whole message and the stream's named events (see
// anthropic_api.h).
#include <ctime>
#include <utility>

#include "serve/anthropic_api.h"
#include "serve/json_body.h"

namespace kvmem::serve {
namespace {

Json UsageJson(const Usage& u, int64_t output_tokens) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", output_tokens}};
}

Json StopSequence(const GenerationResult& r) {
  return r.finish_reason == FinishReason::kStopSequence ? Json(r.stop_sequence) : Json();
}

class MessagesReply final : public ReplyFormat {
 public:
  explicit MessagesReply(ResponseMeta meta) : meta_(std::move(meta)) {}

  Dialect dialect() const override { return Dialect::kAnthropic; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    Json message = Message(AnthropicStopReason(result.finish_reason), StopSequence(result),
                           UsageJson(result.usage, result.usage.completion_tokens));
    if (!text.empty()) {
      message["content"].push_back({{"type", "text"}, {"text", text}});
    }
    return DumpJson(message);
  }

  std::string StreamStart(const PromptInfo& prompt) override {
    const Usage usage{.prompt_tokens = prompt.prompt_tokens,
                      .cached_tokens = prompt.cached_tokens,
                      .completion_tokens = 0};
    return Event("message_start", {{"type", "message_start"},
                                   {"message", Message(nullptr, nullptr, UsageJson(usage, 0))}}) +
           Event("content_block_start", {{"type", "content_block_start"},
                                         {"index", 0},
                                         {"content_block", {{"type", "text"}, {"text", ""}}}}) +
           Event("ping", {{"type", "ping"}});
  }

  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    return Event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", 0},
                                         {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }

  // message_delta's usage is cumulative; it repeats the input counts so a client that missed
  // them in message_start (the backend reports them late) still gets them.
  std::string StreamEnd(const GenerationResult& result) override {
    return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
           Event("message_delta",
                 {{"type", "message_delta"},
                  {"delta",
                   {{"stop_reason", AnthropicStopReason(result.finish_reason)},
                    {"stop_sequence", StopSequence(result)}}},
                  {"usage", UsageJson(result.usage, result.usage.completion_tokens)}}) +
           Event("message_stop", {{"type", "message_stop"}});
  }

  std::string StreamError(const ApiError& error) override {
    return SseEvent("error", ErrorBody(error, Dialect::kAnthropic));
  }

 private:
  static std::string Event(std::string_view name, const Json& data) {
    return SseEvent(name, DumpJson(data));
  }

  Json Message(Json stop_reason, Json stop_sequence, Json usage) const {
    return {{"id", meta_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", meta_.model},
            {"content", Json::array()},
            {"stop_reason", std::move(stop_reason)},
            {"stop_sequence", std::move(stop_sequence)},
            {"usage", std::move(usage)}};
  }

  ResponseMeta meta_;
};

std::string Rfc3339(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json ModelJson(const ModelInfo& model) {
  return {{"type", "model"},
          {"id", model.name},
          {"display_name", model.name},
          {"created_at", Rfc3339(model.created_unix)}};
}

}  // namespace

std::unique_ptr<ReplyFormat> MakeMessagesReply(ResponseMeta meta) {
  return std::make_unique<MessagesReply>(std::move(meta));
}

const char* AnthropicStopReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kLength:
      return "max_tokens";
    case FinishReason::kEndOfTurn:
    case FinishReason::kCancelled:
      break;
  }
  return "end_turn";
}

std::string AnthropicModelList(const ModelInfo& model) {
  return DumpJson({{"data", Json::array({ModelJson(model)})},
                   {"has_more", false},
                   {"first_id", model.name},
                   {"last_id", model.name}});
}

std::string AnthropicModel(const ModelInfo& model) { return DumpJson(ModelJson(model)); }

}  // namespace kvmem::serve
