// OpenAI response objects: whole replies and SSE chunks (see openai_api.h for the stream's
// shape).
#include <utility>

#include "serve/json_body.h"
#include "serve/openai_api.h"
#include "serve/openai_tools.h"

namespace kvmem::serve {
namespace {

Json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

const std::string kDone = SseData("[DONE]");

// What chat and text completions share: the envelope of each object and the stream's tail.
class OpenAiReply : public ReplyFormat {
 public:
  OpenAiReply(ResponseMeta meta, bool include_usage, const char* object, const char* chunk_object)
      : meta_(std::move(meta)),
        include_usage_(include_usage),
        object_(object),
        chunk_object_(chunk_object) {}

  Dialect dialect() const override { return Dialect::kOpenAi; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    Json body = Envelope(object_);
    body["choices"] = Json::array({WholeChoice(text, OpenAiFinishReason(result.finish_reason))});
    if (!result.tool_calls.empty()) {  // tools (serve/tool_reply.h)
      Json& message = body["choices"][0]["message"];
      message["tool_calls"] = OpenAiToolCalls(result.tool_calls);
      if (text.empty()) message["content"] = nullptr;
    }
    body["usage"] = UsageJson(result.usage);
    return DumpJson(body);
  }

  std::string StreamEnd(const GenerationResult& result) override {
    std::string out = Chunk(FinalChoice(OpenAiFinishReason(result.finish_reason)));
    if (include_usage_) {
      Json chunk = Envelope(chunk_object_);
      chunk["choices"] = Json::array();
      chunk["usage"] = UsageJson(result.usage);
      out += SseData(DumpJson(chunk));
    }
    return out + kDone;
  }

  // The openai clients raise on a data event holding an "error" object.
  std::string StreamError(const ApiError& error) override {
    return SseData(ErrorBody(error, Dialect::kOpenAi));
  }

 protected:
  virtual Json WholeChoice(std::string_view text, const char* finish_reason) const = 0;
  virtual Json FinalChoice(const char* finish_reason) const = 0;

  Json Envelope(const char* object) const {
    return {{"id", meta_.id},
            {"object", object},
            {"created", meta_.created_unix},
            {"model", meta_.model}};
  }

  // One chunk event with a single choice; with include_usage every chunk but the last says
  // "usage": null, as OpenAI's do.
  std::string Chunk(Json choice) const {
    Json chunk = Envelope(chunk_object_);
    chunk["choices"] = Json::array({std::move(choice)});
    if (include_usage_) chunk["usage"] = nullptr;
    return SseData(DumpJson(chunk));
  }

 private:
  ResponseMeta meta_;
  bool include_usage_;
  const char* object_;
  const char* chunk_object_;
};

class ChatCompletionReply final : public OpenAiReply {
 public:
  ChatCompletionReply(ResponseMeta meta, bool include_usage)
      : OpenAiReply(std::move(meta), include_usage, "chat.completion", "chat.completion.chunk") {}

  std::string StreamStart(const PromptInfo&) override {
    return Chunk(Delta({{"role", "assistant"}, {"content", ""}}, nullptr));
  }
  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    return Chunk(Delta({{"content", text}}, nullptr));
  }
  std::string StreamToolCallStart(int index, const ToolCall& call) override {
    return Chunk(Delta({{"tool_calls", Json::array({OpenAiToolCallDelta(index, &call, "")})}},
                       nullptr));
  }
  std::string StreamToolCallArguments(int index, std::string_view json) override {
    if (json.empty()) return {};
    return Chunk(Delta({{"tool_calls", Json::array({OpenAiToolCallDelta(index, nullptr, json)})}},
                       nullptr));
  }

 protected:
  Json WholeChoice(std::string_view text, const char* finish_reason) const override {
    return {{"index", 0},
            {"message", {{"role", "assistant"}, {"content", text}}},
            {"logprobs", nullptr},
            {"finish_reason", finish_reason}};
  }
  Json FinalChoice(const char* finish_reason) const override {
    return Delta(Json::object(), finish_reason);
  }

 private:
  static Json Delta(Json delta, const char* finish_reason) {
    return {{"index", 0},
            {"delta", std::move(delta)},
            {"logprobs", nullptr},
            {"finish_reason", finish_reason ? Json(finish_reason) : Json()}};
  }
};

class CompletionReply final : public OpenAiReply {
 public:
  CompletionReply(ResponseMeta meta, bool include_usage, std::string echo)
      : OpenAiReply(std::move(meta), include_usage, "text_completion", "text_completion"),
        echo_(std::move(echo)) {}

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    return OpenAiReply::Complete(echo_ + std::string(text), result);
  }
  std::string StreamStart(const PromptInfo&) override { return StreamText(echo_); }
  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    return Chunk(Choice(text, nullptr));
  }

 protected:
  Json WholeChoice(std::string_view text, const char* finish_reason) const override {
    return Choice(text, finish_reason);
  }
  Json FinalChoice(const char* finish_reason) const override { return Choice("", finish_reason); }

 private:
  static Json Choice(std::string_view text, const char* finish_reason) {
    return {{"text", text},
            {"index", 0},
            {"logprobs", nullptr},
            {"finish_reason", finish_reason ? Json(finish_reason) : Json()}};
  }

  std::string echo_;
};

Json ModelJson(const ModelInfo& model) {
  return {{"id", model.name},
          {"object", "model"},
          {"created", model.created_unix},
          {"owned_by", "kvmem"}};
}

}  // namespace

std::unique_ptr<ReplyFormat> MakeChatCompletionReply(ResponseMeta meta, bool include_usage) {
  return std::make_unique<ChatCompletionReply>(std::move(meta), include_usage);
}

std::unique_ptr<ReplyFormat> MakeCompletionReply(ResponseMeta meta, bool include_usage,
                                                 std::string echo) {
  return std::make_unique<CompletionReply>(std::move(meta), include_usage, std::move(echo));
}

const char* OpenAiFinishReason(FinishReason reason) {
  if (reason == FinishReason::kToolCalls) return "tool_calls";
  return reason == FinishReason::kLength ? "length" : "stop";
}

std::string OpenAiModelList(const ModelInfo& model) {
  return DumpJson({{"object", "list"}, {"data", Json::array({ModelJson(model)})}});
}

std::string OpenAiModel(const ModelInfo& model) { return DumpJson(ModelJson(model)); }

}  // namespace kvmem::serve
