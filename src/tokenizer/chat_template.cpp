#include "tokenizer/chat_template.h"

#include <ctime>

#include "tokenizer/harmony.h"
#include "tokenizer/llama31_tools.h"
#include "tokenizer/qwen_tools.h"
#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

bool Contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Python's str.isspace(): White_Space plus the ASCII information separators U+001C..U+001F.
bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (CodepointFlags(cp) & kCpWhitespace);
}

// Decodes a Jinja (Python) string literal body: \n \t \r \\ \' \" escapes; others kept as is.
std::string UnescapeLiteral(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      default:
        out.push_back('\\');
        out.push_back(c);
    }
  }
  return out;
}

// The body of the string literal that starts right after `prefix` in `source`, up to (not
// including) `terminator`, searching each occurrence of `prefix` in turn. Only bodies that stay
// inside one literal (no quote before the terminator) and are not empty count.
std::string FindLiteralAfter(std::string_view source, std::string_view prefix,
                             std::string_view terminator) {
  for (size_t pos = source.find(prefix); pos != std::string_view::npos;
       pos = source.find(prefix, pos + 1)) {
    const size_t begin = pos + prefix.size();
    const size_t end = source.find(terminator, begin);
    if (end == std::string_view::npos) break;
    const std::string_view body = source.substr(begin, end - begin);
    if (body.empty() || body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return UnescapeLiteral(body);
  }
  return {};
}

std::string DetectChatMlSystemPrompt(std::string_view source) {
  // The newline after the role is a "\n" escape in most sources, a raw newline in some.
  for (std::string_view prefix : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    std::string prompt = FindLiteralAfter(source, prefix, "<|im_end|>");
    if (!prompt.empty()) return prompt;
  }
  return {};
}

// Source text of Qwen 2.5 and 3's templates that fixes how they render tools: the block in the
// system turn, a call, a result. A ChatML template that lacks one renders tools in kvmem's generic
// format instead.
constexpr std::string_view kQwenToolsFingerprint[] = {
    R"(# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are )"
    R"(provided with function signatures within <tools></tools> XML tags:\n<tools>)",
    R"(\n</tools>\n\nFor each function call, return a json object with function name and )"
    R"(arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": )"
    R"(<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n)",
    R"({{- tool | tojson }})",
    R"(<tool_call>\n{"name": "')",
    R"('", "arguments": ')",
    R"('}\n</tool_call>')",
    R"({{- '\n<tool_response>\n' }})",
    R"({{- '\n</tool_response>' }})",
};

bool HasQwenTools(std::string_view source) {
  for (std::string_view fragment : kQwenToolsFingerprint) {
    if (!Contains(source, fragment)) return false;
  }
  return true;
}

// Source text of Meta's Llama 3.1/3.2/3.3 templates that fixes how they render plain chat: the
// system turn (its header, knowledge date, date line, trimmed system message or none) and the
// turns after it. A template that names a knowledge date but lacks one of these (a fine-tune's
// own date, default system message or turn format) is refused rather than rendered as Meta's.
constexpr std::string_view kLlama31Fingerprint[] = {
    R"("<|start_header_id|>system<|end_header_id|>\n\n")",
    R"("Cutting Knowledge Date: December 2023\n")",
    R"("Today Date: " + date_string + "\n\n")",
    R"(set system_message = messages[0]['content']|trim)",
    R"(set system_message = "")",
    R"('<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>')",
    R"('<|start_header_id|>assistant<|end_header_id|>\n\n')",
};

Result<ChatTemplate> DetectLlama31(std::string_view source) {
  for (std::string_view fragment : kLlama31Fingerprint) {
    if (!Contains(source, fragment)) {
      return Unsupported("Llama-3.1-style chat template that differs from Meta's: no " +
                         std::string(fragment));
    }
  }
  ChatTemplate t;
  t.kind = ChatTemplateKind::kLlama31;
  // Llama 3.2's template tries strftime_now first; the literal is its fallback.
  t.llama31_date = FindLiteralAfter(source, "set date_string = \"", "\"");
  if (t.llama31_date.empty()) t.llama31_date = FindLiteralAfter(source, "set date_string = '", "'");
  if (t.llama31_date.empty()) {
    return Unsupported("Llama-3.1-style chat template without a fallback date_string");
  }
  return t;
}

// Source text of the official GPT-OSS template that fixes how it renders plain chat.
constexpr std::string_view kHarmonyFingerprint[] = {
    R"(You are ChatGPT, a large language model trained by OpenAI.)",
    R"("Knowledge cutoff: 2024-06\n")",
    R"("Current date: " + strftime_now("%Y-%m-%d") + "\n\n")",
    R"(set reasoning_effort = "medium")",
    R"(# Valid channels: analysis, commentary, final. Channel must be included for every message.)",
    R"("# Instructions\n\n")",
    R"("<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>")",
    R"("<|start|>user<|message|>" + message.content + "<|end|>")",
};

Result<ChatTemplate> DetectHarmony(std::string_view source) {
  for (std::string_view fragment : kHarmonyFingerprint) {
    if (!Contains(source, fragment)) {
      return Unsupported("harmony chat template that differs from GPT-OSS's: no " +
                         std::string(fragment));
    }
  }
  return ChatTemplateFor(ChatTemplateKind::kHarmony);
}

std::string TodayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &utc);
  return buf;
}

void RenderChatMl(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                  std::string* out) {
  if (!messages.empty() && messages[0].role != "system" && !tmpl.default_system_prompt.empty()) {
    *out += "<|im_start|>system\n" + tmpl.default_system_prompt + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    *out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
}

void RenderLlama3(std::span<const ChatMessage> messages, std::string* out) {
  for (const ChatMessage& m : messages) {
    *out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    *out += TrimPythonWhitespace(m.content);
    *out += "<|eot_id|>";
  }
}

Status RenderLlama31(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                     std::string* out) {
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || m.role == "ipython") {
      return Unsupported("Llama-3.1 chat template: '" + m.role +
                         "' messages (tool results) are not supported; kvmem renders no tools");
    }
  }
  std::string_view system;
  if (!messages.empty() && messages[0].role == "system") {
    system = TrimPythonWhitespace(messages[0].content);
    messages = messages.subspan(1);
  }
  *out += "<|start_header_id|>system<|end_header_id|>\n\n";
  *out += "Cutting Knowledge Date: December 2023\n";
  *out += "Today Date: " + tmpl.llama31_date + "\n\n";
  *out += system;
  *out += "<|eot_id|>";
  RenderLlama3(messages, out);
  return Status::Ok();
}

Status RenderGemma(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                   std::string* out) {
  std::string first_user_prefix;
  if (!messages.empty() && messages[0].role == "system") {
    if (!tmpl.gemma_system_supported) return InvalidArgument("System role not supported");
    first_user_prefix = messages[0].content + tmpl.gemma_system_separator;
    messages = messages.subspan(1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      return InvalidArgument("Conversation roles must alternate user/assistant/user/assistant/...");
    }
    *out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n";
    if (i == 0) *out += first_user_prefix;
    *out += TrimPythonWhitespace(m.content);
    *out += "<end_of_turn>\n";
  }
  return Status::Ok();
}

}  // namespace

std::string_view TrimPythonWhitespace(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const Utf8Char c = DecodeUtf8(s, begin);
    if (!c.valid || !IsPythonSpace(c.cp)) break;
    begin += c.len;
  }
  // Scan forward, remembering where the last non-space character ended.
  size_t end = begin;
  for (size_t pos = begin; pos < s.size();) {
    const Utf8Char c = DecodeUtf8(s, pos);
    pos += c.len;
    if (!c.valid || !IsPythonSpace(c.cp)) end = pos;
  }
  return s.substr(begin, end - begin);
}

const char* ChatTemplateKindName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kChatMl:
      return "chatml";
    case ChatTemplateKind::kLlama3:
      return "llama3";
    case ChatTemplateKind::kLlama31:
      return "llama3.1";
    case ChatTemplateKind::kGemma:
      return "gemma";
    case ChatTemplateKind::kHarmony:
      return "harmony";
  }
  return "?";
}

ChatTemplate ChatTemplateFor(ChatTemplateKind kind) {
  ChatTemplate t;
  t.kind = kind;
  return t;
}

Result<ChatTemplate> DetectChatTemplate(std::string_view source, std::string_view architecture) {
  ChatTemplate t;
  if (source.empty()) {
    if (architecture.substr(0, 5) == "gemma") return ChatTemplateFor(ChatTemplateKind::kGemma);
    if (architecture == "qwen2") {
      t.default_system_prompt = kQwen2SystemPrompt;
      return t;
    }
    return NotFound("no chat template in the model and none known for architecture '" +
                    std::string(architecture) + "'");
  }
  if (Contains(source, "<|im_start|>")) {
    t.kind = ChatTemplateKind::kChatMl;
    t.default_system_prompt = DetectChatMlSystemPrompt(source);
    t.qwen_tools = HasQwenTools(source);
    return t;
  }
  if (Contains(source, "<|start_header_id|>")) {
    if (Contains(source, "Cutting Knowledge Date")) return DetectLlama31(source);
    t.kind = ChatTemplateKind::kLlama3;
    return t;
  }
  if (Contains(source, "<|start|>") && Contains(source, "<|channel|>"))
    return DetectHarmony(source);
  if (Contains(source, "<start_of_turn>")) {
    t.kind = ChatTemplateKind::kGemma;
    std::string separator =
        FindLiteralAfter(source, "first_user_prefix = messages[0]['content'] + '", "'");
    if (!separator.empty()) t.gemma_system_separator = separator;
    t.gemma_system_supported = !Contains(source, "System role not supported");
    return t;
  }
  return Unsupported(
      "chat template of an unknown family (supported: ChatML, Llama-3, Gemma, harmony)");
}

Result<std::string> RenderChat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                               bool add_generation_prompt) {
  std::string out;
  switch (tmpl.kind) {
    case ChatTemplateKind::kChatMl:
      RenderChatMl(tmpl, messages, &out);
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplateKind::kLlama3:
      RenderLlama3(messages, &out);
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::kLlama31:
      KVMEM_RETURN_IF_ERROR(RenderLlama31(tmpl, messages, &out));
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplateKind::kGemma:
      KVMEM_RETURN_IF_ERROR(RenderGemma(tmpl, messages, &out));
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    case ChatTemplateKind::kHarmony:
      KVMEM_RETURN_IF_ERROR(
          RenderHarmony(messages, add_generation_prompt,
                        tmpl.harmony_date.empty() ? TodayUtc() : tmpl.harmony_date, "", &out));
      break;
  }
  return out;
}

Result<std::string> RenderChatWithTools(const ChatTemplate& tmpl,
                                        std::span<const ChatMessage> messages,
                                        std::span<const std::string> tools,
                                        bool add_generation_prompt) {
  if (tmpl.kind == ChatTemplateKind::kLlama31) {
    return RenderLlama31WithTools(tmpl, messages, tools, add_generation_prompt);
  }
  if (tmpl.kind == ChatTemplateKind::kChatMl && tmpl.qwen_tools) {
    return RenderQwenWithTools(tmpl, messages, tools, add_generation_prompt);
  }
  if (tmpl.kind == ChatTemplateKind::kHarmony) {
    if (tools.size() > 1) return InvalidArgument("harmony takes its tools as one namespace");
    std::string out;
    KVMEM_RETURN_IF_ERROR(RenderHarmony(
        messages, add_generation_prompt,
        tmpl.harmony_date.empty() ? TodayUtc() : tmpl.harmony_date,
        tools.empty() ? std::string_view() : std::string_view(tools[0]), &out));
    return out;
  }
  return InvalidArgument(std::string("the ") + ChatTemplateKindName(tmpl.kind) +
                         " chat template has no tool format of its own");
}

Result<std::string> RenderChat(ChatTemplateKind kind, std::span<const ChatMessage> messages,
                               bool add_generation_prompt) {
  return RenderChat(ChatTemplateFor(kind), messages, add_generation_prompt);
}

bool OpensChatMessage(std::string_view piece) {
  return piece == "<|im_start|>" || piece == "<|start_header_id|>" || piece == "<start_of_turn>";
}

Result<std::string> RenderContinuation(const RenderChatFn& render,
                                       std::span<const ChatMessage> messages) {
  const std::vector<ChatMessage> before = {{"user", "x"}};
  std::vector<ChatMessage> after = {{"user", "x"}, {"assistant", "y"}};
  after.insert(after.end(), messages.begin(), messages.end());
  KVMEM_ASSIGN_OR_RETURN(std::string a, render(before, true));
  KVMEM_ASSIGN_OR_RETURN(std::string b, render(after, true));
  if (!b.starts_with(a + "y")) {
    return Unsupported("this chat template does not render turns independently");
  }
  return b.substr(a.size() + 1);
}

}  // namespace kvmem::tokenizer
