// Response objects and stream events of the Responses API (responses_api.h), and the record a
// finished response leaves.
#include <string>
#include <utility>

#include "core/log.h"
#include "serve/json_body.h"
#include "serve/responses_api.h"

namespace kvmem::serve {
namespace {

Json UsageJson(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json TextPart(std::string_view text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
}

class ResponsesReply : public ReplyFormat {
 public:
  ResponsesReply(ResponseMeta meta, Json echo, ResponseStorage storage)
      : meta_(std::move(meta)),
        echo_(std::move(echo)),
        storage_(std::move(storage)),
        item_id_(NewResponseId("msg_")) {}

  Dialect dialect() const override { return Dialect::kOpenAi; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    return DumpJson(Finish(text, result));
  }

  std::string StreamStart(const PromptInfo&) override {
    const Json response = Object("in_progress", Json::array(), nullptr);
    std::string out = Event("response.created", {{"response", response}});
    out += Event("response.in_progress", {{"response", response}});
    out += Event("response.output_item.added",
                 {{"output_index", 0}, {"item", Message("in_progress", "")}});
    out += Event("response.content_part.added", Part({{"part", TextPart("")}}));
    return out;
  }

  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    text_ += text;
    return Event("response.output_text.delta",
                 Part({{"delta", text}, {"logprobs", Json::array()}}));
  }

  std::string StreamEnd(const GenerationResult& result) override {
    const Json response = Finish(text_, result);
    std::string out =
        Event("response.output_text.done", Part({{"text", text_}, {"logprobs", Json::array()}}));
    out += Event("response.content_part.done", Part({{"part", TextPart(text_)}}));
    out +=
        Event("response.output_item.done", {{"output_index", 0}, {"item", response["output"][0]}});
    const std::string status = response["status"].get<std::string>();
    out += Event(status == "completed"    ? "response.completed"
                 : status == "incomplete" ? "response.incomplete"
                                          : "response.failed",
                 {{"response", response}});
    return out;
  }

  std::string StreamError(const ApiError& error) override {
    const Json body = Json::parse(ErrorBody(error, Dialect::kOpenAi), nullptr, false);
    const Json code = body.is_object() ? body["error"]["code"] : Json();
    Json response = Object("failed", Json::array(), nullptr);
    response["error"] = {{"code", code.is_string() ? code : Json("server_error")},
                         {"message", error.message}};
    return Event("response.failed", {{"response", response}});
  }

 private:
  // The response object with this request's echoed fields.
  Json Object(const char* status, Json output, Json usage) const {
    Json o = echo_;
    o["id"] = meta_.id;
    o["object"] = "response";
    o["created_at"] = meta_.created_unix;
    o["status"] = status;
    o["model"] = meta_.model;
    o["output"] = std::move(output);
    o["usage"] = std::move(usage);
    o["error"] = nullptr;
    o["incomplete_details"] = nullptr;
    return o;
  }

  Json Message(const char* status, std::string_view text) const {
    Json content = Json::array();
    if (std::string_view(status) != "in_progress") content.push_back(TextPart(text));
    return {{"id", item_id_},
            {"type", "message"},
            {"role", "assistant"},
            {"status", status},
            {"content", std::move(content)}};
  }

  // The fields of an event about the output text's part.
  Json Part(Json fields) const {
    fields["item_id"] = item_id_;
    fields["output_index"] = 0;
    fields["content_index"] = 0;
    return fields;
  }

  std::string Event(const char* type, Json fields) {
    fields["type"] = type;
    fields["sequence_number"] = sequence_++;
    return SseEvent(type, DumpJson(fields));
  }

  // The final object; stored when the request asked (a cancelled reply is nobody's).
  Json Finish(std::string_view text, const GenerationResult& result) {
    const bool truncated = result.finish_reason == FinishReason::kLength ||
                           result.finish_reason == FinishReason::kCancelled;
    const char* status = truncated ? "incomplete" : "completed";
    Json output = Json::array();
    output.push_back(Message(status, text));
    Json response = Object(status, std::move(output), UsageJson(result.usage));
    if (result.finish_reason == FinishReason::kLength) {
      response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    }
    if (storage_.backend == nullptr || result.finish_reason == FinishReason::kCancelled) {
      return response;
    }
    std::vector<ChatMessage> messages = std::move(storage_.conversation);
    messages.push_back({"assistant", std::string(text)});
    Status saved = storage_.backend->PutResponse(
        storage_.tenant, meta_.id, ResponseRecord(response, storage_.agent, messages));
    if (!saved.ok()) {
      KVMEM_LOG_ERROR("response %s: not stored: %s", meta_.id.c_str(), saved.ToString().c_str());
      response["status"] = "failed";
      response["error"] = {{"code", "server_error"},
                           {"message", "the response could not be stored"}};
    }
    return response;
  }

  ResponseMeta meta_;
  Json echo_;
  ResponseStorage storage_;
  std::string item_id_;
  std::string text_;
  int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<ReplyFormat> MakeResponsesReply(ResponseMeta meta, Json echo,
                                                ResponseStorage storage) {
  return std::make_unique<ResponsesReply>(std::move(meta), std::move(echo), std::move(storage));
}

}  // namespace kvmem::serve
