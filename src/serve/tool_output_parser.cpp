// ToolOutputParser (tool_calls.h): small state machines over what the model writes: in the
// generic format, the one spelling the grammar lets it write, {"response":"…"} or
// {"tool_calls":[{"name":"…","arguments":{…}},…]}; Llama 3.1's call JSON; Qwen's <tool_call>
// blocks. Harmony's replies are read by HarmonyToolReader (serve/harmony_tools.h).
#include <algorithm>
#include <cstdint>

#include "serve/harmony_tools.h"
#include "serve/llama31_tools.h"
#include "serve/reply_format.h"
#include "serve/tool_calls.h"
#include "tokenizer/unicode.h"

namespace kvmem::serve {
namespace {

constexpr std::string_view kResponseOpen = "{\"response\":\"";
constexpr std::string_view kCallsOpen = "{\"tool_calls\":[";
constexpr std::string_view kCallOpen = "{\"name\":\"";
constexpr std::string_view kArgsKey = ",\"arguments\":";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Four hex digits at s[at]; -1 when missing or malformed.
int32_t Hex4(std::string_view s, size_t at) {
  if (at + 4 > s.size()) return -1;
  int32_t v = 0;
  for (size_t i = at; i < at + 4; ++i) {
    const int h = HexValue(s[i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// The escape at s[0] == '\\': bytes consumed (0: incomplete, wait for more), its text in *out.
size_t DecodeEscape(std::string_view s, std::string* out) {
  if (s.size() < 2) return 0;
  switch (s[1]) {
    case 'n': out->push_back('\n'); return 2;
    case 't': out->push_back('\t'); return 2;
    case 'r': out->push_back('\r'); return 2;
    case 'b': out->push_back('\b'); return 2;
    case 'f': out->push_back('\f'); return 2;
    case 'u': break;
    default: out->push_back(s[1]); return 2;  // \" \\ \/
  }
  const int32_t hi = Hex4(s, 2);
  if (hi < 0) return s.size() < 6 ? 0 : 6;
  if (hi < 0xD800 || hi > 0xDFFF) {
    tokenizer::AppendUtf8(static_cast<uint32_t>(hi), out);
    return 6;
  }
  // A surrogate pair: \uD8xx\uDCxx.
  if (s.size() < 12) return 0;
  const int32_t lo = s[6] == '\\' && s[7] == 'u' ? Hex4(s, 8) : -1;
  if (hi > 0xDBFF || lo < 0xDC00 || lo > 0xDFFF) {
    tokenizer::AppendUtf8(0xFFFD, out);
    return 6;
  }
  tokenizer::AppendUtf8(0x10000 + ((static_cast<uint32_t>(hi) - 0xD800) << 10) +
                 (static_cast<uint32_t>(lo) - 0xDC00),
             out);
  return 12;
}

}  // namespace

ToolOutputParser::ToolOutputParser(std::string id_prefix, ToolFormat format)
    : id_prefix_(std::move(id_prefix)), format_(format) {
  if (format_ == ToolFormat::kHarmony) harmony_ = std::make_unique<HarmonyToolReader>(id_prefix_);
}

ToolOutputParser::~ToolOutputParser() = default;

void ToolOutputParser::Push(std::string_view text, std::vector<ToolEvent>* events) {
  if (harmony_ != nullptr) return harmony_->Push(text, events, &complete_);
  buf_.append(text);
  switch (format_) {
    case ToolFormat::kLlama31:
      return DrainLlama31(events);
    case ToolFormat::kQwen:
      return DrainQwen(events);
    case ToolFormat::kGeneric:
    case ToolFormat::kHarmony:
      return Drain(events);
  }
}

void ToolOutputParser::Finish(std::vector<ToolEvent>* events) {
  if (harmony_ != nullptr) return harmony_->Finish(events, &complete_);
  if (format_ == ToolFormat::kLlama31) return FinishLlama31(events);
  if (format_ == ToolFormat::kQwen) return FinishQwen(events);
  Drain(events);
  if (state_ == State::kStart) ToRaw(events);  // a prefix of the format and nothing more
}

void ToolOutputParser::DrainLlama31(std::vector<ToolEvent>* events) {
  if (state_ == State::kStart) {
    const size_t first = buf_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return;  // whitespace so far: held
    if (buf_[first] != '{') return ToRaw(events);
    state_ = State::kLlamaCall;
  }
  if (state_ == State::kRaw) ToRaw(events);
}

void ToolOutputParser::FinishLlama31(std::vector<ToolEvent>* events) {
  if (state_ != State::kLlamaCall) return ToRaw(events);
  const nlohmann::ordered_json call =
      nlohmann::ordered_json::parse(buf_, nullptr, /*allow_exceptions=*/false);
  const auto name = call.is_object() ? call.find("name") : call.end();
  auto args = call.is_object() ? call.find("parameters") : call.end();
  if (args == call.end() && call.is_object()) args = call.find("arguments");
  if (name == call.end() || !name->is_string() || args == call.end() || !args->is_object()) {
    return ToRaw(events);  // JSON, but not a call: the reply's text
  }
  ToolCall c{NewResponseId(id_prefix_), name->get<std::string>(), PythonJsonDumps(*args)};
  events->push_back({.kind = ToolEvent::Kind::kCallStart, .index = 0, .call = c});
  events->push_back({.kind = ToolEvent::Kind::kCallArguments, .index = 0, .text = c.arguments});
  complete_.push_back(std::move(c));
  buf_.clear();
  state_ = State::kDone;
}

namespace {

constexpr std::string_view kQwenOpenTag = "<tool_call>";
constexpr std::string_view kQwenCloseTag = "</tool_call>";

// The length of the longest suffix of `text` that `tag` starts with (held back: the tag may be
// arriving).
size_t PartialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

// Text is passed on as it comes, less what may open a block: a partial "<tool_call>" and the one
// newline the template puts before each block.
void ToolOutputParser::DrainQwen(std::vector<ToolEvent>* events) {
  for (;;) {
    if (state_ == State::kQwenCall) {
      const size_t end = buf_.find(kQwenCloseTag);
      if (end == std::string::npos) return;
      const std::string block = buf_.substr(0, end);
      buf_.erase(0, end + kQwenCloseTag.size());
      state_ = State::kStart;
      if (!ReadQwenCall(block, events)) {
        std::string text = std::string(kQwenOpenTag) + block + std::string(kQwenCloseTag);
        events->push_back({.kind = ToolEvent::Kind::kText, .text = std::move(text)});
      }
      continue;
    }
    const size_t open = buf_.find(kQwenOpenTag);
    size_t text_end = open;
    if (open == std::string::npos) {
      text_end = buf_.size() - PartialTagAtEnd(buf_, kQwenOpenTag);
      if (text_end > 0 && buf_[text_end - 1] == '\n') {
        --text_end;  // perhaps the newline before a block
      }
    } else if (open > 0 && buf_[open - 1] == '\n') {
      --text_end;
    }
    if (text_end > 0) {
      events->push_back({.kind = ToolEvent::Kind::kText, .text = buf_.substr(0, text_end)});
    }
    if (open == std::string::npos) {
      buf_.erase(0, text_end);
      return;
    }
    buf_.erase(0, open + kQwenOpenTag.size());
    state_ = State::kQwenCall;
  }
}

void ToolOutputParser::FinishQwen(std::vector<ToolEvent>* events) {
  std::string rest = std::move(buf_);
  buf_.clear();
  if (state_ == State::kQwenCall) rest = std::string(kQwenOpenTag) + rest;  // never closed
  // What follows the last call is whitespace the model wrote before ending its turn.
  const bool blank = rest.find_first_not_of(" \t\r\n") == std::string::npos;
  if (!rest.empty() && !(blank && !complete_.empty())) {
    events->push_back({.kind = ToolEvent::Kind::kText, .text = std::move(rest)});
  }
  state_ = State::kDone;
}

// A block's JSON, {"name": …, "arguments": {…}} (arguments as a JSON string also taken); false
// when it is not a call.
bool ToolOutputParser::ReadQwenCall(std::string_view block, std::vector<ToolEvent>* events) {
  using OJson = nlohmann::ordered_json;
  const OJson call = OJson::parse(block, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object()) return false;
  const auto name = call.find("name");
  const auto args_it = call.find("arguments");
  if (name == call.end() || !name->is_string() || args_it == call.end()) return false;
  OJson args = *args_it;
  if (args.is_string()) args = OJson::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return false;
  const int index = static_cast<int>(complete_.size());
  ToolCall c{NewResponseId(id_prefix_), name->get<std::string>(), PythonJsonDumps(args)};
  events->push_back({.kind = ToolEvent::Kind::kCallStart, .index = index, .call = c});
  events->push_back({.kind = ToolEvent::Kind::kCallArguments, .index = index, .text = c.arguments});
  complete_.push_back(std::move(c));
  return true;
}

ToolOutputParser::Match ToolOutputParser::Expect(std::string_view literal) {
  if (buf_.size() >= literal.size()) {
    if (buf_.compare(0, literal.size(), literal) != 0) return Match::kNo;
    buf_.erase(0, literal.size());
    return Match::kYes;
  }
  return literal.substr(0, buf_.size()) == buf_ ? Match::kWait : Match::kNo;
}

void ToolOutputParser::ToRaw(std::vector<ToolEvent>* events) {
  state_ = State::kRaw;
  if (!buf_.empty()) events->push_back({.kind = ToolEvent::Kind::kText, .text = std::move(buf_)});
  buf_.clear();
}

bool ToolOutputParser::DrainResponse(std::vector<ToolEvent>* events) {
  std::string text;
  size_t i = 0;
  bool closed = false;
  while (i < buf_.size()) {
    const char c = buf_[i];
    if (c == '"') {
      closed = true;
      ++i;
      break;
    }
    if (c != '\\') {
      text.push_back(c);
      ++i;
      continue;
    }
    const size_t n = DecodeEscape(std::string_view(buf_).substr(i), &text);
    if (n == 0) break;
    i += n;
  }
  buf_.erase(0, i);
  if (!text.empty()) events->push_back({.kind = ToolEvent::Kind::kText, .text = std::move(text)});
  if (closed) state_ = State::kDone;
  return closed;
}

bool ToolOutputParser::DrainArguments(std::vector<ToolEvent>* events) {
  size_t i = 0;
  bool closed = false;
  for (; i < buf_.size() && !closed; ++i) {
    const char c = buf_[i];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      closed = --depth_ == 0;
    }
  }
  if (i > 0) {
    const int index = static_cast<int>(calls_.size()) - 1;
    std::string piece = buf_.substr(0, i);
    calls_.back().arguments += piece;
    events->push_back(
        {.kind = ToolEvent::Kind::kCallArguments, .index = index, .text = std::move(piece)});
    buf_.erase(0, i);
  }
  if (closed) state_ = State::kCallClose;
  return closed;
}

void ToolOutputParser::Drain(std::vector<ToolEvent>* events) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const Match reply = Expect(kResponseOpen);
        if (reply == Match::kYes) {
          state_ = State::kResponse;
          continue;
        }
        const Match calls = Expect(kCallsOpen);
        if (calls == Match::kYes) {
          state_ = State::kCallOpen;
          continue;
        }
        if (reply == Match::kNo && calls == Match::kNo) {
          ToRaw(events);
          continue;
        }
        return;
      }
      case State::kResponse:
        if (!DrainResponse(events)) return;
        continue;
      case State::kCallOpen: {
        const Match m = Expect(kCallOpen);
        if (m == Match::kWait) return;
        if (m == Match::kNo) {
          ToRaw(events);
          continue;
        }
        state_ = State::kName;
        name_.clear();
        continue;
      }
      case State::kName: {
        const size_t end = buf_.find('"');
        if (end == std::string::npos) return;
        name_ = buf_.substr(0, end);  // tool names need no escapes (ValidateToolName)
        buf_.erase(0, end + 1);
        state_ = State::kArgsKey;
        continue;
      }
      case State::kArgsKey: {
        const Match m = Expect(kArgsKey);
        if (m == Match::kWait) return;
        if (m == Match::kNo) {
          ToRaw(events);
          continue;
        }
        calls_.push_back({NewResponseId(id_prefix_), name_, ""});
        events->push_back({.kind = ToolEvent::Kind::kCallStart,
                           .index = static_cast<int>(calls_.size()) - 1,
                           .call = calls_.back()});
        depth_ = 0;
        in_string_ = escaped_ = false;
        state_ = State::kArgs;
        continue;
      }
      case State::kArgs:
        if (!DrainArguments(events)) return;
        continue;
      case State::kCallClose: {
        if (buf_.size() < 2) return;  // "}," or "}]"
        if (buf_[0] != '}' || (buf_[1] != ',' && buf_[1] != ']')) {
          ToRaw(events);
          continue;
        }
        complete_.push_back(calls_.back());
        state_ = buf_[1] == ',' ? State::kCallOpen : State::kDone;
        buf_.erase(0, 2);
        continue;
      }
      case State::kDone:
        buf_.clear();  // the closing braces
        return;
      case State::kLlamaCall:  // only in kLlama31 (DrainLlama31)
      case State::kQwenCall:   // only in kQwen (DrainQwen)
        return;
      case State::kRaw:
        if (!buf_.empty()) ToRaw(events);
        return;
    }
  }
}

}  // namespace kvmem::serve
