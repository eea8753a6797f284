// What every generation endpoint shares once its body is parsed: the validated request for the
// backend, whether the client asked for a stream, and the dialect's writer of the reply. The
// server drives a ReplyFormat without knowing the dialect: Complete() for a whole reply, or
// StreamStart → StreamText… → StreamEnd (or StreamError) for Server-Sent Events.
// Thread-safety: a ReplyFormat belongs to one request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/api_error.h"
#include "serve/api_types.h"

namespace kvmem::serve {

// Identity of one response: the id the client sees, its creation time, the model name.
struct ResponseMeta {
  std::string id;
  int64_t created_unix = 0;
  std::string model;
};

// A fresh id: `prefix` + 24 random characters of [0-9A-Za-z], e.g. "chatcmpl-…", "msg_…".
std::string NewResponseId(std::string_view prefix);
ResponseMeta NewResponseMeta(std::string_view id_prefix, std::string model);

// What a request did to its agent's conversation when it diverged from it, as both dialects'
// usage show it ("conversation": {"diverged": true, "action": "fork", "checkpoint": "ckpt-2",
// "restored": "ckpt-1"}; null when it did not diverge) and as the X-Kvmem-Divergence header
// ("fork; checkpoint=ckpt-2; restored=ckpt-1"; empty when it did not).
inline constexpr const char* kDivergenceHeader = "X-Kvmem-Divergence";
nlohmann::json DivergenceJson(const Divergence& d);
std::string DivergenceHeaderValue(const Divergence& d);

// Some of one choice's reply: a piece of it while streaming, or all of it.
struct ReplyChunk {
  int choice = 0;
  std::string text = {};                    // valid UTF-8
  std::vector<TokenLogprob> logprobs = {};  // of the tokens this text comes from (when asked)
};

class ReplyFormat {
 public:
  virtual ~ReplyFormat() = default;

  virtual Dialect dialect() const = 0;
  // The whole reply (stream: false) as a JSON body; `text` is valid UTF-8.
  virtual std::string Complete(std::string_view text, const GenerationResult& result) = 0;
  // SSE bytes, each a whole number of events. StreamText gets valid UTF-8 and returns "" for
  // "" (an empty chunk would end an HTTP chunked body).
  virtual std::string StreamStart(const PromptInfo& prompt) = 0;
  virtual std::string StreamText(std::string_view text) = 0;
  virtual std::string StreamEnd(const GenerationResult& result) = 0;
  // An error after the stream started (the status line has gone out as 200).
  virtual std::string StreamError(const ApiError& error) = 0;

  // What the server calls. A dialect with choices and logprobs overrides them; the defaults
  // serve choice 0's text through Complete and StreamText.
  // The whole reply: one entry per choice, in order; `prompt` as the backend reported it.
  virtual std::string CompleteChoices(const PromptInfo& prompt,
                                      const std::vector<ReplyChunk>& choices,
                                      const GenerationResult& result) {
    (void)prompt;
    return Complete(choices.empty() ? std::string_view() : choices[0].text, result);
  }
  virtual std::string StreamChunk(const ReplyChunk& chunk) {
    return chunk.choice == 0 ? StreamText(chunk.text) : std::string();
  }

  // Tool calls (serve/tool_reply.h drives these; replies without tools never get them): call
  // `index` of the reply begins (id and name), then its arguments' JSON text comes in pieces.
  // Whole replies and StreamEnd find the calls in GenerationResult::tool_calls.
  virtual std::string StreamToolCallStart(int /*index*/, const ToolCall& /*call*/) { return {}; }
  virtual std::string StreamToolCallArguments(int /*index*/, std::string_view /*json*/) {
    return {};
  }
};

struct ParsedRequest {
  GenerationRequest generation;
  bool stream = false;
  std::unique_ptr<ReplyFormat> reply;
  // The body field holding the prompt, named by a context-length error; empty: "prompt" for
  // raw prompts, else "messages".
  std::string prompt_field = {};
};

// Server-Sent Events framing as both official clients parse it (WHATWG event-stream): a
// serialized JSON value has no raw newline, so each event is one data line and a blank line.
inline std::string SseData(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  out.append("data: ").append(data).append("\n\n");
  return out;
}
inline std::string SseEvent(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(event.size() + data.size() + 16);
  out.append("event: ").append(event).append("\ndata: ").append(data).append("\n\n");
  return out;
}

}  // namespace kvmem::serve
