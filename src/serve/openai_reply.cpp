// OpenAI response objects: whole replies and SSE chunks (see openai_api.h for the stream's
// shape), with n choices and logprobs in each endpoint's own format: chat's
// `logprobs.content[]` of {token, logprob, bytes, top_logprobs}, completions' parallel arrays
// `tokens`, `token_logprobs`, `top_logprobs` (token → logprob maps), `text_offset`.
#include <algorithm>
#include <utility>

#include "serve/json_body.h"
#include "serve/openai_api.h"
#include "serve/openai_tools.h"
#include "serve/utf8.h"

namespace kvmem::serve {
namespace {

Json UsageJson(const Usage& u) {
  Json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.divergence.diverged) j["conversation"] = DivergenceJson(u.divergence);
  return j;
}

const std::string kDone = SseData("[DONE]");

Json BytesJson(std::string_view token) {
  Json out = Json::array();
  for (char c : token) out.push_back(static_cast<unsigned char>(c));
  return out;
}

Json LogprobValue(const std::optional<float>& v) { return v ? Json(*v) : Json(); }

const ChoiceResult& ChoiceEnd(const GenerationResult& result, int i, ChoiceResult* scratch) {
  if (static_cast<size_t>(i) < result.choices.size()) return result.choices[i];
  *scratch = {result.finish_reason, result.stop_sequence};
  return *scratch;
}

// What chat and text completions share: the envelope of each object and the stream's tail.
class OpenAiReply : public ReplyFormat {
 public:
  OpenAiReply(ResponseMeta meta, bool include_usage, OpenAiReplyOptions options, const char* object,
              const char* chunk_object)
      : meta_(std::move(meta)),
        include_usage_(include_usage),
        options_(std::move(options)),
        object_(object),
        chunk_object_(chunk_object) {}

  Dialect dialect() const override { return Dialect::kOpenAi; }

  std::string Complete(std::string_view text, const GenerationResult& result) override {
    return CompleteChoices({}, {ReplyChunk{0, std::string(text), {}}}, result);
  }

  std::string CompleteChoices(const PromptInfo& prompt, const std::vector<ReplyChunk>& choices,
                              const GenerationResult& result) override {
    Json body = Envelope(object_);
    body["choices"] = Json::array();
    ChoiceResult scratch;
    for (int i = 0; i < std::max<int>(options_.n, static_cast<int>(choices.size())); ++i) {
      const ReplyChunk empty{i, "", {}};
      const ReplyChunk& c = static_cast<size_t>(i) < choices.size() ? choices[i] : empty;
      body["choices"].push_back(
          WholeChoice(prompt, c, OpenAiFinishReason(ChoiceEnd(result, i, &scratch).finish_reason)));
    }
    if (!result.tool_calls.empty()) {  // tools (serve/tool_reply.h): chat, choice 0
      Json& message = body["choices"][0]["message"];
      message["tool_calls"] = OpenAiToolCalls(result.tool_calls);
      if (message["content"] == "") message["content"] = nullptr;
    }
    body["usage"] = UsageJson(result.usage);
    return DumpJson(body);
  }

  std::string StreamText(std::string_view text) override {
    return StreamChunk({0, std::string(text), {}});
  }

  std::string StreamEnd(const GenerationResult& result) override {
    std::string out;
    ChoiceResult scratch;
    for (int i = 0; i < options_.n; ++i) {
      out +=
          Chunk(FinalChoice(i, OpenAiFinishReason(ChoiceEnd(result, i, &scratch).finish_reason)));
    }
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
  virtual Json WholeChoice(const PromptInfo& prompt, const ReplyChunk& choice,
                           const char* finish_reason) = 0;
  virtual Json FinalChoice(int index, const char* finish_reason) const = 0;

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

  const OpenAiReplyOptions& options() const { return options_; }

 private:
  ResponseMeta meta_;
  bool include_usage_;
  OpenAiReplyOptions options_;
  const char* object_;
  const char* chunk_object_;
};

class ChatCompletionReply final : public OpenAiReply {
 public:
  ChatCompletionReply(ResponseMeta meta, bool include_usage, OpenAiReplyOptions options)
      : OpenAiReply(std::move(meta), include_usage, std::move(options), "chat.completion",
                    "chat.completion.chunk") {}

  std::string StreamStart(const PromptInfo&) override {
    std::string out;
    for (int i = 0; i < options().n; ++i) {
      out += Chunk(Delta(i, {{"role", "assistant"}, {"content", ""}}, Json(), nullptr));
    }
    return out;
  }
  std::string StreamChunk(const ReplyChunk& c) override {
    if (c.text.empty() && c.logprobs.empty()) return {};
    return Chunk(Delta(c.choice, {{"content", c.text}}, LogprobsJson(c.logprobs), nullptr));
  }
  std::string StreamToolCallStart(int index, const ToolCall& call) override {
    return Chunk(
        Delta(0, {{"tool_calls", Json::array({OpenAiToolCallDelta(index, &call, "")})}}, Json(),
              nullptr));
  }
  std::string StreamToolCallArguments(int index, std::string_view json) override {
    if (json.empty()) return {};
    return Chunk(
        Delta(0, {{"tool_calls", Json::array({OpenAiToolCallDelta(index, nullptr, json)})}},
              Json(), nullptr));
  }

 protected:
  Json WholeChoice(const PromptInfo&, const ReplyChunk& c, const char* finish_reason) override {
    return {{"index", c.choice},
            {"message", {{"role", "assistant"}, {"content", c.text}}},
            {"logprobs", LogprobsJson(c.logprobs)},
            {"finish_reason", finish_reason}};
  }
  Json FinalChoice(int index, const char* finish_reason) const override {
    return Delta(index, Json::object(), Json(), finish_reason);
  }

 private:
  static Json Delta(int index, Json delta, Json logprobs, const char* finish_reason) {
    return {{"index", index},
            {"delta", std::move(delta)},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", finish_reason ? Json(finish_reason) : Json()}};
  }

  // {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal"}
  Json LogprobsJson(const std::vector<TokenLogprob>& tokens) const {
    if (!options().logprobs) return Json();
    Json content = Json::array();
    for (const TokenLogprob& t : tokens) {
      Json top = Json::array();
      for (const TopLogprob& a : t.top) {
        top.push_back({{"token", a.token}, {"logprob", a.logprob}, {"bytes", BytesJson(a.token)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", LogprobValue(t.logprob)},
                         {"bytes", BytesJson(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
};

class CompletionReply final : public OpenAiReply {
 public:
  CompletionReply(ResponseMeta meta, bool include_usage, OpenAiReplyOptions options)
      : OpenAiReply(std::move(meta), include_usage, std::move(options), "text_completion",
                    "text_completion") {}

  // The echoed prompt opens every choice, with the prompt's logprobs when there are any.
  std::string StreamStart(const PromptInfo& prompt) override {
    std::string out;
    for (int i = 0; i < options().n; ++i) {
      out += StreamChunk({i, options().echo, EchoedLogprobs(prompt)});
    }
    return out;
  }
  std::string StreamChunk(const ReplyChunk& c) override {
    if (c.text.empty() && c.logprobs.empty()) return {};
    return Chunk(Choice(c.choice, c.text, LogprobsJson(c.choice, c.logprobs), nullptr));
  }

 protected:
  Json WholeChoice(const PromptInfo& prompt, const ReplyChunk& c,
                   const char* finish_reason) override {
    std::vector<TokenLogprob> all = EchoedLogprobs(prompt);
    all.insert(all.end(), c.logprobs.begin(), c.logprobs.end());
    return Choice(c.choice, options().echo + c.text, LogprobsJson(c.choice, all), finish_reason);
  }
  Json FinalChoice(int index, const char* finish_reason) const override {
    return Choice(index, "", Json(), finish_reason);
  }

 private:
  static Json Choice(int index, std::string_view text, Json logprobs, const char* finish_reason) {
    return {{"text", text},
            {"index", index},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", finish_reason ? Json(finish_reason) : Json()}};
  }

  std::vector<TokenLogprob> EchoedLogprobs(const PromptInfo& prompt) const {
    return options().echo.empty() ? std::vector<TokenLogprob>() : prompt.logprobs;
  }

  // {tokens, token_logprobs, top_logprobs, text_offset}; offsets count bytes of the choice's
  // text from its start (the echoed prompt included), continuing across a stream's chunks.
  Json LogprobsJson(int choice, const std::vector<TokenLogprob>& tokens) {
    if (!options().logprobs) return Json();
    if (offsets_.size() <= static_cast<size_t>(choice)) offsets_.resize(choice + 1, 0);
    int64_t& offset = offsets_[choice];
    Json out = {{"tokens", Json::array()},
                {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()},
                {"text_offset", Json::array()}};
    for (const TokenLogprob& t : tokens) {
      out["tokens"].push_back(t.token);
      out["token_logprobs"].push_back(LogprobValue(t.logprob));
      if (t.logprob) {
        // The sampled (or given) token is always listed, as vLLM does.
        Json top = Json::object();
        for (const TopLogprob& a : t.top) top[SafeKey(a.token)] = a.logprob;
        top[SafeKey(t.token)] = *t.logprob;
        out["top_logprobs"].push_back(std::move(top));
      } else {
        out["top_logprobs"].push_back(nullptr);
      }
      out["text_offset"].push_back(offset);
      offset += static_cast<int64_t>(t.token.size());
    }
    return out;
  }

  // Object keys must be valid UTF-8 before they reach the JSON object (DumpJson repairs
  // values, not a map's ordering of repaired keys).
  static std::string SafeKey(const std::string& token) {
    if (FindInvalidUtf8(token) == std::string::npos) return token;
    Utf8Assembler repair;
    return repair.Push(token) + repair.Flush();
  }

  std::vector<int64_t> offsets_;  // (choices) bytes of text listed so far
};

Json ModelJson(const ModelInfo& model) {
  return {{"id", model.name},
          {"object", "model"},
          {"created", model.created_unix},
          {"owned_by", "kvmem"}};
}

}  // namespace

std::unique_ptr<ReplyFormat> MakeChatCompletionReply(ResponseMeta meta, bool include_usage,
                                                     OpenAiReplyOptions options) {
  return std::make_unique<ChatCompletionReply>(std::move(meta), include_usage, std::move(options));
}

std::unique_ptr<ReplyFormat> MakeCompletionReply(ResponseMeta meta, bool include_usage,
                                                 OpenAiReplyOptions options) {
  return std::make_unique<CompletionReply>(std::move(meta), include_usage, std::move(options));
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
