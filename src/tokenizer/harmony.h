// OpenAI's harmony chat format (GPT-OSS), as its official chat template renders plain chat and
// as the model answers:
//
//   <|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.
//   Knowledge cutoff: 2024-06
//   Current date: YYYY-MM-DD
//
//   Reasoning: medium
//
//   # Valid channels: analysis, commentary, final. Channel must be included for every
//   message.<|end|>
//   [<|start|>developer<|message|># Instructions\n\n{leading system message}\n\n<|end|>]
//   <|start|>user<|message|>{content}<|end|>
//   <|start|>assistant<|channel|>final<|message|>{content}<|end|>      (earlier replies)
//   <|start|>assistant                                                (generation prompt)
//
// The reply is a sequence of messages, <|channel|>NAME<|message|>TEXT<|end|> then
// <|start|>assistant... again, the last one ending with <|return|>: what the user sees is the
// final channel; the analysis channel (reasoning) is not content. Tools are not rendered:
// "tool" messages are Unsupported. Thread-safe: pure functions; HarmonyReply is one stream.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {

// The generation prompt, also how a reply's later messages open.
inline constexpr std::string_view kHarmonyGenerationPrompt = "<|start|>assistant";

// Renders `messages` (date: the system turn's "Current date", YYYY-MM-DD). InvalidArgument where
// the official template raises (channel tags inside an assistant message's content).
Status RenderHarmony(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     std::string_view date, std::string* out);

// True when `ids` end with the harmony generation prompt: the reply that follows is harmony's.
bool EndsWithHarmonyGenerationPrompt(const Tokenizer& tok, std::span<const int32_t> ids);

// The text a reply shows, token by token (whole UTF-8 characters). After a prompt that ends with
// harmony's generation prompt, the reply is split into its messages and Push returns only the
// final channel's text ("" for headers, control tokens and other channels; a reply that never
// opens a message is shown whole at its end); after any other prompt, every token's text.
class ReplyDecoder {
 public:
  ReplyDecoder(const Tokenizer* tok, std::span<const int32_t> prompt)
      : tok_(tok), harmony_(EndsWithHarmonyGenerationPrompt(*tok, prompt)), text_(tok) {}
  Result<std::string> Push(int32_t id);
  std::string Flush();
  bool harmony() const { return harmony_; }
  // Harmony: the analysis channel's text so far (the model's reasoning).
  const std::string& analysis() const { return analysis_; }

 private:
  enum class State { kHeader, kBody, kBetween };
  const Tokenizer* tok_;
  bool harmony_;
  StreamingDecoder text_;
  State state_ = State::kHeader;  // the generation prompt opened a message header
  std::string header_;            // the header's text after <|channel|>
  bool in_final_ = false;
  bool in_analysis_ = false;
  std::string analysis_;
};

}  // namespace kvmem::tokenizer
