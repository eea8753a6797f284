// Chat prompt formatting for the model families kvmem runs. Not a Jinja engine: the family is
// detected from the GGUF's tokenizer.chat_template source (or general.architecture when there
// is none), and each family's official template is re-implemented by hand. Output equals what
// transformers' Jinja rendering gives with bos_token = "" (the tokenizer adds BOS itself).
//
//   kChatMl  <|im_start|>role\ncontent<|im_end|>\n ...          generation: <|im_start|>assistant\n
//            SmolLM2 and Qwen2 insert a default system turn when the first message is not one.
//            Qwen 2.5 and 3's templates also render tools (tokenizer/qwen_tools.h).
//   kLlama3  <|start_header_id|>role<|end_header_id|>\n\ntrim(content)<|eot_id|> ...
//            generation: <|start_header_id|>assistant<|end_header_id|>\n\n
//   kLlama31 Llama 3.1, 3.2 and 3.3: a system turn always comes first,
//            <|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n
//            Today Date: <date>\n\n[trim(leading system content)]<|eot_id|>, then the other
//            messages as kLlama3. <date> is the template's fallback date_string ("26 Jul 2024"):
//            Llama 3.2's template asks the renderer for today's date through strftime_now
//            (transformers provides it); kvmem keeps the fallback, so a prompt, and the KV rows an
//            agent stores for it, do not change with the day. Tools are not rendered: messages
//            carry no tool definitions or calls, and "tool"/"ipython" messages are Unsupported.
//            An empty conversation, on which the official template fails, gives the system turn.
//   kHarmony GPT-OSS: harmony.h (a system turn with the date and reasoning effort, a leading system
//            message as the developer's instructions, earlier replies on the final channel).
// RenderChat renders no tools; RenderChatWithTools renders them in the formats of Llama 3.1,
// Qwen 2.5/3 and harmony (the other templates have none: serve writes its generic one).
//   kGemma   <start_of_turn>user\n[system + "\n\n"]trim(content)<end_of_turn>\n ...; roles must
//            alternate user/assistant; "assistant" is written "model".
//            generation: <start_of_turn>model\n
//
// Thread-safe: pure functions.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::tokenizer {

enum class ChatTemplateKind { kChatMl, kLlama3, kLlama31, kGemma, kHarmony };

// The date_string Llama 3.1/3.2/3.3's templates fall back on when the renderer passes none.
inline constexpr std::string_view kLlama31DefaultDate = "26 Jul 2024";

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others are passed through)
  std::string content;
  // Harmony's tools (tokenizer/harmony.h): the function an assistant message calls, with its
  // arguments as the template's tojson writes them; empty for a message that calls nothing.
  std::string tool{};
  std::string tool_arguments{};
};

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatMl;
  // kChatMl: the system turn inserted when the first message is not "system"; "" for none.
  std::string default_system_prompt;
  // kChatMl: the template renders tools in Qwen 2.5/3's format (tokenizer/qwen_tools.h).
  bool qwen_tools = false;
  // kGemma: appended to a leading system message, which then opens the first user turn.
  std::string gemma_system_separator = "\n\n";
  // kGemma: false for Gemma-2's template, which rejects a system message.
  bool gemma_system_supported = true;
  // kLlama31: the "Today Date:" of the system turn, the template's fallback date_string.
  std::string llama31_date = std::string(kLlama31DefaultDate);
  // kHarmony: the system turn's "Current date" (YYYY-MM-DD). Empty: today's (UTC) at rendering,
  // as the official template's strftime_now, which has no fallback; a new day changes the
  // prompt's first message, so an agent's stored rows are prefilled again once.
  std::string harmony_date;
};

inline constexpr std::string_view kSmolLm2SystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
inline constexpr std::string_view kQwen2SystemPrompt = "You are a helpful assistant.";

const char* ChatTemplateKindName(ChatTemplateKind kind);

// The family's template with its defaults (plain ChatML without a default system prompt).
ChatTemplate ChatTemplateFor(ChatTemplateKind kind);

// Recognizes the family of a Jinja chat template and its parameters (default system prompt,
// Gemma's system separator, Llama 3.1's fallback date). With an empty source, falls back to
// `architecture` ("gemma*", "qwen2"). Unsupported for a template of another family, or a Llama
// 3.1-style one whose system turn differs from the official templates' (another knowledge date, a
// default system message, no fallback date); NotFound when neither says anything.
Result<ChatTemplate> DetectChatTemplate(std::string_view jinja_source,
                                        std::string_view architecture);

// The prompt text for `messages`, to be encoded with parse_special = true. InvalidArgument where
// the official template raises (Gemma: roles not alternating, or a system message it rejects);
// Unsupported for a tool message in Llama 3.1's template.
Result<std::string> RenderChat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                               bool add_generation_prompt);
Result<std::string> RenderChat(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                               bool add_generation_prompt);

// The prompt with tools in the template's own format: Llama 3.1's (llama31_tools.h), Qwen's
// (qwen_tools.h) or harmony's (harmony.h); `tools` as that format's renderer takes them.
// InvalidArgument for a template without a tool format of its own, and where the format's
// renderer refuses the conversation.
Result<std::string> RenderChatWithTools(const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages,
                                        std::span<const std::string> tools,
                                        bool add_generation_prompt);

// What continues a rendered conversation that ends in an assistant's reply as the model wrote
// it (without its end-of-turn text) with `messages`: the end of that reply's turn, then the
// messages as the template writes them after it, the assistant's turn opened. `render` is
// RenderChat or RenderChatWithTools with its template bound; the continuation is found by
// rendering a stand-in exchange (user "x", assistant "y") before the messages. Unsupported for a
// template whose turns do not render independently of what came before them.
using RenderChatFn =
    std::function<Result<std::string>(std::span<const ChatMessage>, bool add_generation_prompt)>;
Result<std::string> RenderContinuation(const RenderChatFn& render,
                                       std::span<const ChatMessage> messages);

// Whether a token's text opens a message in one of the families' templates: "<|im_start|>",
// "<|start_header_id|>", "<start_of_turn>". Where an agent's memory marks its turns.
bool OpensChatMessage(std::string_view piece);

// Python's str.strip() (Jinja's trim filter): removes leading and trailing Unicode whitespace.
std::string_view TrimPythonWhitespace(std::string_view s);

}  // namespace kvmem::tokenizer
