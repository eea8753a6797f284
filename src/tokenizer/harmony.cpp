#include "tokenizer/harmony.h"

#include <algorithm>

namespace kvmem::tokenizer {
namespace {

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The word of `header` after `marker` (up to a space or a special token).
std::string WordAfter(std::string_view header, std::string_view marker) {
  const size_t at = header.find(marker);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + marker.size());
  rest = rest.substr(0, std::min(rest.find(' '), rest.find("<|")));
  return std::string(rest);
}

// Whether an assistant message after `i` replies without calling (the template then drops the
// analysis of the call at `i`).
bool FinalReplyFollows(std::span<const ChatMessage> messages, size_t i) {
  for (size_t j = i + 1; j < messages.size(); ++j) {
    if (messages[j].role == "assistant" && messages[j].tool.empty()) return true;
  }
  return false;
}

}  // namespace

HarmonyHeader ParseHarmonyHeader(std::string_view header) {
  return {WordAfter(header, "<|channel|>"), WordAfter(header, "to=")};
}

Status RenderHarmony(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     std::string_view date, std::string_view tools, std::string* out) {
  *out += "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n";
  *out += "Knowledge cutoff: 2024-06\nCurrent date: ";
  *out += date;
  *out += "\n\nReasoning: medium\n\n";
  *out +=
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.";
  if (!tools.empty()) {
    *out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  }
  *out += "<|end|>";
  std::string_view instructions;
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    instructions = messages[0].content;
    messages = messages.subspan(1);
  }
  if (!instructions.empty() || !tools.empty()) {
    *out += "<|start|>developer<|message|>";
    if (!instructions.empty()) *out += "# Instructions\n\n" + std::string(instructions) + "\n\n";
    if (!tools.empty()) *out += "# Tools\n\n" + std::string(tools);
    *out += "<|end|>";
  }
  std::string last_call;  // the function the latest call went to; results come from it
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "assistant") {
      if (Contains(m.content, "<|channel|>analysis<|message|>") ||
          Contains(m.content, "<|channel|>final<|message|>")) {
        return InvalidArgument(
            "harmony chat template: an assistant message's content holds <|channel|> tags");
      }
      if (!m.tool.empty()) {
        if (!m.content.empty() && !FinalReplyFollows(messages, i)) {
          *out += "<|start|>assistant<|channel|>analysis<|message|>" + m.content + "<|end|>";
        }
        *out += "<|start|>assistant to=functions." + m.tool +
                "<|channel|>commentary json<|message|>" + m.tool_arguments + "<|call|>";
        last_call = m.tool;
        continue;
      }
      const bool last = i + 1 == messages.size() && !add_generation_prompt;
      *out += "<|start|>assistant<|channel|>final<|message|>" + m.content +
              (last ? "<|return|>" : "<|end|>");
      if (!last) last_call.clear();
    } else if (m.role == "user") {
      *out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "tool") {
      if (last_call.empty()) {
        return InvalidArgument(
            "harmony chat template: a tool result with no assistant tool call before it");
      }
      *out += "<|start|>functions." + last_call + " to=assistant<|channel|>commentary<|message|>" +
              m.content + "<|end|>";
    }
    // The official template renders nothing for other roles (a later system message).
  }
  if (add_generation_prompt) *out += kHarmonyGenerationPrompt;
  return Status::Ok();
}

bool EndsWithHarmonyGenerationPrompt(const Tokenizer& tok, std::span<const int32_t> ids) {
  std::string tail;
  for (size_t i = ids.size(); i > 0 && tail.size() < kHarmonyGenerationPrompt.size(); --i) {
    if (!tok.vocab().Contains(ids[i - 1])) return false;
    tail.insert(0, tok.TokenToPiece(ids[i - 1], /*render_special=*/true));
  }
  return std::string_view(tail).ends_with(kHarmonyGenerationPrompt);
}

std::string ReplyDecoder::Flush() {
  if (!harmony_) return text_.Flush();
  std::string rest = text_.Flush();
  if (state_ == State::kHeader) return header_ + rest;
  return in_final_ ? rest : std::string();
}

Result<std::string> ReplyDecoder::Push(int32_t id) {
  if (!harmony_) return text_.Push(id);
  if (!tok_->vocab().Contains(id)) {
    return OutOfRange("token id " + std::to_string(id) + " is outside the vocabulary");
  }
  const std::string_view special = tok_->TokenToPiece(id, /*render_special=*/true);
  if (special == "<|message|>" && state_ == State::kHeader) {
    // The header reads "<|channel|>NAME[ more]": the channel is its first word.
    const std::string_view channel = std::string_view(header_).substr(0, header_.find(' '));
    in_final_ = channel == "final";
    in_analysis_ = channel == "analysis";
    state_ = State::kBody;
    return std::string();
  }
  if (special == "<|end|>" || special == "<|return|>" || special == "<|call|>") {
    std::string rest = text_.Flush();
    // A reply that never opened a message (no <|message|>) is shown as it is.
    if (state_ == State::kHeader) rest = header_ + rest;
    if (!in_final_ && state_ != State::kHeader) rest.clear();
    state_ = State::kBetween;
    in_final_ = in_analysis_ = false;
    return rest;
  }
  if (special == "<|start|>") {
    state_ = State::kHeader;
    header_.clear();
    return std::string();
  }
  if (special == "<|channel|>" && state_ == State::kHeader) {
    header_.clear();
    return std::string();
  }
  KVMEM_ASSIGN_OR_RETURN(std::string piece, text_.Push(id));
  if (state_ == State::kHeader) {
    header_ += piece;
    return std::string();
  }
  if (state_ != State::kBody) return std::string();
  if (in_analysis_) analysis_ += piece;
  return in_final_ ? piece : std::string();
}

}  // namespace kvmem::tokenizer
