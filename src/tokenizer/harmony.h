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
// final channel; the analysis channel (reasoning) is not content.
//
// Tools, as the template renders them: the system turn says calls go to the commentary channel,
// the developer turn ends with "# Tools\n\n" and the functions' namespace (TypeScript types,
// written by serve/harmony_tools.h); a call is
//   [<|start|>assistant<|channel|>analysis<|message|>{content}<|end|>]   (unless a final reply
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{args}<|call|>
//                                                                       follows in the history)
// and its result <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{json}<|end|>.
// The model writes its calls' headers as it likes (the recipient before or after the channel,
// <|constrain|>json), and ends the reply at <|call|>.
// Thread-safe: pure functions; ReplyDecoder is one stream.
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

// Renders `messages` (date: the system turn's "Current date", YYYY-MM-DD; tools: the namespace
// of functions, "" for none). An assistant message with a `tool` is a call, a "tool" message the
// result of the latest call, its content as the template's tojson writes it (the caller
// serializes it). InvalidArgument where the official template raises (channel tags inside an
// assistant message's content, a result with no call before it).
Status RenderHarmony(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     std::string_view date, std::string_view tools, std::string* out);

// A message header as the model writes it, the text between <|start|>ROLE (or the generation
// prompt) and <|message|>, special tokens included: "<|channel|>commentary to=functions.f
// <|constrain|>json", " to=functions.f<|channel|>commentary json".
struct HarmonyHeader {
  std::string channel;    // "analysis", "commentary", "final"; "" when none is named
  std::string recipient;  // "functions.f"; "" when the message is to no one
};
HarmonyHeader ParseHarmonyHeader(std::string_view header);

// True when `ids` end with the harmony generation prompt: the reply that follows is harmony's.
bool EndsWithHarmonyGenerationPrompt(const Tokenizer& tok, std::span<const int32_t> ids);

// The text a reply shows, token by token (whole UTF-8 characters). After a prompt that ends with
// harmony's generation prompt, the reply is split into its messages and Push returns only the
// final channel's text ("" for headers, control tokens and other channels; a reply that never
// opens a message is shown whole at its end); after any other prompt, every token's text.
// `raw`: every token's text, special tokens included, whatever the prompt.
class ReplyDecoder {
 public:
  ReplyDecoder(const Tokenizer* tok, std::span<const int32_t> prompt, bool raw = false)
      : tok_(tok),
        harmony_(!raw && EndsWithHarmonyGenerationPrompt(*tok, prompt)),
        text_(tok, /*render_special=*/raw) {}
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
