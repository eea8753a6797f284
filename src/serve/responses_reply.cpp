// Response objects and stream events of the Responses API (responses_api.h), and the record a
// finished response leaves. The output is a message item (the reply's text) and a function_call
// item per tool call (serve/tool_reply.h drives those), in the order they started; a reply with
// neither has an empty message.
#include <string>
#include <utility>

#include "core/log.h"
#include "serve/json_body.h"
#include "serve/openai_tools.h"
#include "serve/responses_api.h"

namespace kvmem::serve {
namespace {

constexpr int kMessage = -1;  // in ResponsesReply::order_: the message item, else a call index

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
        message_id_(NewResponseId("msg_")) {}

  Dialect dialect() const override { return Dialect::kOpenAi; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    return DumpJson(Finish(text, result));
  }

  std::string StreamStart(const PromptInfo&) override {
    const Json response = Object("in_progress", Json::array(), nullptr);
    std::string out = Event("response.created", {{"response", response}});
    return out + Event("response.in_progress", {{"response", response}});
  }

  std::string StreamText(std::string_view text) override {
    if (text.empty()) return {};
    std::string out = OpenMessage();
    text_ += text;
    return out + Event("response.output_text.delta",
                       Part({{"delta", text}, {"logprobs", Json::array()}}));
  }

  std::string StreamToolCallStart(int index, const ToolCall& call) override {
    if (index != static_cast<int>(call_ids_.size())) return {};
    call_ids_.push_back(NewResponseId("fc_"));
    order_.push_back(index);
    return Event("response.output_item.added",
                 {{"output_index", order_.size() - 1}, {"item", CallItem(index, call, "")}});
  }

  std::string StreamToolCallArguments(int index, std::string_view json) override {
    if (index < 0 || index >= static_cast<int>(call_ids_.size()) || json.empty()) return {};
    return Event(
        "response.function_call_arguments.delta",
        {{"item_id", call_ids_[index]}, {"output_index", OutputIndex(index)}, {"delta", json}});
  }

  std::string StreamEnd(const GenerationResult& result) override {
    std::string out;
    if (result.tool_calls.empty()) out += OpenMessage();  // every reply has some output
    const Json response = Finish(text_, result);
    for (size_t i = 0; i < order_.size(); ++i) {
      const Json& item = response["output"][i];
      if (order_[i] == kMessage) {
        out += Event("response.output_text.done",
                     Part({{"text", text_}, {"logprobs", Json::array()}}));
        out += Event("response.content_part.done", Part({{"part", TextPart(text_)}}));
      } else {
        out += Event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                               {"output_index", i},
                                                               {"name", item["name"]},
                                                               {"arguments", item["arguments"]}});
      }
      out += Event("response.output_item.done", {{"output_index", i}, {"item", item}});
    }
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

  // The events that open the message item, the first time.
  std::string OpenMessage() {
    for (int o : order_) {
      if (o == kMessage) return {};
    }
    order_.push_back(kMessage);
    std::string out =
        Event("response.output_item.added",
              {{"output_index", order_.size() - 1}, {"item", MessageItem("in_progress", "")}});
    return out + Event("response.content_part.added", Part({{"part", TextPart("")}}));
  }

  Json MessageItem(const char* status, std::string_view text) const {
    Json content = Json::array();
    if (std::string_view(status) != "in_progress") content.push_back(TextPart(text));
    return {{"id", message_id_},
            {"type", "message"},
            {"role", "assistant"},
            {"status", status},
            {"content", std::move(content)}};
  }

  Json CallItem(int index, const ToolCall& call, const char* status) const {
    const bool done = std::string_view(status) == "completed";
    return {{"id", call_ids_[index]},
            {"type", "function_call"},
            {"call_id", call.id},
            {"name", call.name},
            {"arguments", done ? call.arguments : ""},
            {"status", done ? "completed" : "in_progress"}};
  }

  int OutputIndex(int call) const {
    for (size_t i = 0; i < order_.size(); ++i) {
      if (order_[i] == call) return static_cast<int>(i);
    }
    return 0;
  }

  // The fields of an event about the message's text part.
  Json Part(Json fields) const {
    fields["item_id"] = message_id_;
    fields["output_index"] = OutputIndex(kMessage);
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
    // A whole reply: the text, then the calls; a stream: as they started (calls it did not
    // start, which a ToolReply never leaves, last).
    if (order_.empty() && (!text.empty() || result.tool_calls.empty())) order_.push_back(kMessage);
    for (size_t i = call_ids_.size(); i < result.tool_calls.size(); ++i) {
      call_ids_.push_back(NewResponseId("fc_"));
      order_.push_back(static_cast<int>(i));
    }
    Json output = Json::array();
    for (int o : order_) {
      if (o == kMessage) {
        output.push_back(MessageItem(status, text));
      } else if (static_cast<size_t>(o) < result.tool_calls.size()) {
        output.push_back(CallItem(o, result.tool_calls[o], "completed"));
      }
    }
    Json response = Object(status, std::move(output), UsageJson(result.usage));
    if (result.finish_reason == FinishReason::kLength) {
      response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    }
    if (storage_.backend == nullptr || result.finish_reason == FinishReason::kCancelled) {
      return response;
    }
    Json reply = {{"role", "assistant"}, {"content", std::string(text)}};
    if (!result.tool_calls.empty()) {
      reply["tool_calls"] = OpenAiToolCalls(result.tool_calls);
      if (text.empty()) reply["content"] = nullptr;
    }
    Json messages = std::move(storage_.conversation);
    messages.push_back(std::move(reply));
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
  std::string message_id_;
  std::string text_;
  std::vector<int> order_;             // output items as they started: kMessage or a call
  std::vector<std::string> call_ids_;  // "fc_…" of each call
  int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<ReplyFormat> MakeResponsesReply(ResponseMeta meta, Json echo,
                                                ResponseStorage storage) {
  return std::make_unique<ResponsesReply>(std::move(meta), std::move(echo), std::move(storage));
}

}  // namespace kvmem::serve
