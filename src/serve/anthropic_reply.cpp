// Anthropic response objects: the whole message and the stream's named events (see
// anthropic_api.h).
#include <ctime>
#include <utility>

#include "serve/anthropic_api.h"
#include "serve/json_body.h"

namespace kvmem::serve {
namespace {

Json UsageJson(const Usage& u, int64_t output_tokens) {
  Json j = {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens},
            {"output_tokens", output_tokens}};
  if (u.divergence.diverged) j["conversation"] = DivergenceJson(u.divergence);
  return j;
}

Json StopSequence(const GenerationResult& r) {
  return r.finish_reason == FinishReason::kStopSequence ? Json(r.stop_sequence) : Json();
}

class MessagesReply final : public ReplyFormat {
 public:
  MessagesReply(ResponseMeta meta, bool lazy_text_block)
      : meta_(std::move(meta)), lazy_text_block_(lazy_text_block) {}

  Dialect dialect() const override { return Dialect::kAnthropic; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    Json message = Message(AnthropicStopReason(result.finish_reason), StopSequence(result),
                           UsageJson(result.usage, result.usage.completion_tokens));
    if (!text.empty()) {
      message["content"].push_back({{"type", "text"}, {"text", text}});
    }
    for (const ToolCall& call : result.tool_calls) {
      message["content"].push_back(
          {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", Input(call)}});
    }
    return DumpJson(message);
  }

  std::string StreamStart(const PromptInfo& prompt) override {
    const Usage usage{.prompt_tokens = prompt.prompt_tokens,
                      .cached_tokens = prompt.cached_tokens,
                      .completion_tokens = 0,
                      .divergence = prompt.divergence};
    std::string out = Event("message_start", {{"type", "message_start"},
                                              {"message", Message(nullptr, nullptr, UsageJson(usage, 0))}});
    if (!lazy_text_block_) {
      out += OpenBlock({{"type", "text"}, {"text", ""}});
      text_block_open_ = true;
    }
    return out + Event("ping", {{"type", "ping"}});
  }

  // Content blocks open as their content comes: a text block, then (with tools) a tool_use
  // block per call, each closed when the next opens or at the end.
  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    std::string out;
    if (!text_block_open_) {
      out = CloseBlock();  // (two statements: the operands of + are unsequenced)
      out += OpenBlock({{"type", "text"}, {"text", ""}});
      text_block_open_ = true;
    }
    return out + Event("content_block_delta",
                       {{"type", "content_block_delta"},
                        {"index", n_blocks_ - 1},
                        {"delta", {{"type", "text_delta"}, {"text", text}}}});
  }

  std::string StreamToolCallStart(int, const ToolCall& call) override {
    std::string out = CloseBlock();
    return out + OpenBlock({{"type", "tool_use"},
                            {"id", call.id},
                            {"name", call.name},
                            {"input", Json::object()}});
  }

  std::string StreamToolCallArguments(int, std::string_view json) override {
    if (json.empty()) return {};
    return Event("content_block_delta",
                 {{"type", "content_block_delta"},
                  {"index", n_blocks_ - 1},
                  {"delta", {{"type", "input_json_delta"}, {"partial_json", json}}}});
  }

  // message_delta's usage is cumulative; it repeats the input counts so a client that missed
  // them in message_start (the backend reports them late) still gets them.
  std::string StreamEnd(const GenerationResult& result) override {
    // An empty reply still has its (empty) text block, as before blocks opened lazily.
    std::string out = n_blocks_ == 0 ? OpenBlock({{"type", "text"}, {"text", ""}}) : "";
    out += CloseBlock();
    return out +
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

  static Json Input(const ToolCall& call) {
    Json input = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    return input.is_object() ? input : Json::object();
  }

  std::string OpenBlock(Json block) {
    block_open_ = true;
    return Event("content_block_start", {{"type", "content_block_start"},
                                         {"index", n_blocks_++},
                                         {"content_block", std::move(block)}});
  }
  std::string CloseBlock() {
    if (!block_open_) return {};
    block_open_ = text_block_open_ = false;
    return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", n_blocks_ - 1}});
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
  bool lazy_text_block_;  // with tools: a reply may be calls only, with no text block
  int n_blocks_ = 0;  // content blocks opened so far
  bool block_open_ = false;
  bool text_block_open_ = false;
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

std::unique_ptr<ReplyFormat> MakeMessagesReply(ResponseMeta meta, bool tools) {
  return std::make_unique<MessagesReply>(std::move(meta), tools);
}

const char* AnthropicStopReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kLength:
      return "max_tokens";
    case FinishReason::kToolCalls:
      return "tool_use";
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
