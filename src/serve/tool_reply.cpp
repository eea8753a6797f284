#include "serve/tool_reply.h"

#include <utility>
#include <vector>

#include "serve/tool_calls.h"

namespace kvmem::serve {
namespace {

class ToolReply final : public ReplyFormat {
 public:
  ToolReply(std::unique_ptr<ReplyFormat> inner, std::string id_prefix, ToolFormat format)
      : inner_(std::move(inner)), parser_(std::move(id_prefix), format) {}

  Dialect dialect() const override { return inner_->dialect(); }

  // One choice (the parsers refuse n > 1 and logprobs with tools).
  std::string Complete(std::string_view text, const GenerationResult& result) override {
    return CompleteChoices({}, {ReplyChunk{0, std::string(text), {}}}, result);
  }
  std::string CompleteChoices(const PromptInfo& prompt, const std::vector<ReplyChunk>& choices,
                              const GenerationResult& result) override {
    std::vector<ToolEvent> events;
    if (!choices.empty()) parser_.Push(choices[0].text, &events);
    parser_.Finish(&events);
    std::string reply;
    for (const ToolEvent& e : events) {
      if (e.kind == ToolEvent::Kind::kText) reply += e.text;
    }
    return inner_->CompleteChoices(prompt, {ReplyChunk{0, std::move(reply), {}}},
                                   WithCalls(result));
  }

  std::string StreamStart(const PromptInfo& prompt) override {
    return inner_->StreamStart(prompt);
  }
  std::string StreamText(std::string_view text) override {
    std::vector<ToolEvent> events;
    parser_.Push(text, &events);
    return Render(events);
  }
  std::string StreamChunk(const ReplyChunk& chunk) override {
    return chunk.choice == 0 ? StreamText(chunk.text) : std::string();
  }
  std::string StreamEnd(const GenerationResult& result) override {
    std::vector<ToolEvent> events;
    parser_.Finish(&events);
    return Render(events) + inner_->StreamEnd(WithCalls(result));
  }
  std::string StreamError(const ApiError& error) override { return inner_->StreamError(error); }

 private:
  std::string Render(const std::vector<ToolEvent>& events) {
    std::string out;
    for (const ToolEvent& e : events) {
      switch (e.kind) {
        case ToolEvent::Kind::kText:
          out += inner_->StreamChunk({0, e.text, {}});
          break;
        case ToolEvent::Kind::kCallStart:
          out += inner_->StreamToolCallStart(e.index, e.call);
          break;
        case ToolEvent::Kind::kCallArguments:
          out += inner_->StreamToolCallArguments(e.index, e.text);
          break;
      }
    }
    return out;
  }

  GenerationResult WithCalls(const GenerationResult& result) const {
    GenerationResult r = result;
    r.tool_calls = parser_.complete_calls();
    if (!r.tool_calls.empty() && r.finish_reason == FinishReason::kEndOfTurn) {
      r.finish_reason = FinishReason::kToolCalls;
      if (!r.choices.empty()) r.choices[0].finish_reason = FinishReason::kToolCalls;
    }
    return r;
  }

  std::unique_ptr<ReplyFormat> inner_;
  ToolOutputParser parser_;
};

}  // namespace

std::unique_ptr<ReplyFormat> MakeToolReply(std::unique_ptr<ReplyFormat> inner,
                                           std::string id_prefix, ToolFormat format) {
  return std::make_unique<ToolReply>(std::move(inner), std::move(id_prefix), format);
}

}  // namespace kvmem::serve
