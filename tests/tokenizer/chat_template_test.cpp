// Chat templates against the official Jinja templates rendered by jinja2
// (scripts/make_tokenizer_vectors.py -> chat_template_vectors.json).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvmem::tokenizer {
namespace {

TEST(ChatTemplate, DetectsOfficialTemplates) {
  const auto v = testing::LoadVectors("chat_template_vectors.json");
  const auto& t = v["templates"];
  auto smollm2 = DetectChatTemplate(t["smollm2"].get<std::string>(), "llama");
  ASSERT_TRUE(smollm2.ok()) << smollm2.status().ToString();
  EXPECT_EQ(smollm2->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(smollm2->default_system_prompt, kSmolLm2SystemPrompt);
  auto qwen2 = DetectChatTemplate(t["qwen2"].get<std::string>(), "qwen2");
  ASSERT_TRUE(qwen2.ok());
  EXPECT_EQ(qwen2->kind, ChatTemplateKind::kChatMl);
  EXPECT_EQ(qwen2->default_system_prompt, kQwen2SystemPrompt);
  auto llama3 = DetectChatTemplate(t["llama3"].get<std::string>(), "llama");
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(llama3->kind, ChatTemplateKind::kLlama3);
  auto gemma3 = DetectChatTemplate(t["gemma3"].get<std::string>(), "gemma3");
  ASSERT_TRUE(gemma3.ok());
  EXPECT_EQ(gemma3->kind, ChatTemplateKind::kGemma);
  EXPECT_EQ(gemma3->gemma_system_separator, "\n\n");
  EXPECT_TRUE(gemma3->gemma_system_supported);
  for (const char* name : {"llama3.1", "llama3.1-early", "llama3.2"}) {
    auto llama31 = DetectChatTemplate(t[name].get<std::string>(), "llama");
    ASSERT_TRUE(llama31.ok()) << name << ": " << llama31.status().ToString();
    EXPECT_EQ(llama31->kind, ChatTemplateKind::kLlama31) << name;
    EXPECT_EQ(llama31->llama31_date, kLlama31DefaultDate) << name;
  }
}

TEST(ChatTemplate, MatchesJinjaRenders) {
  const auto v = testing::LoadVectors("chat_template_vectors.json");
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, source] : v["templates"].items()) {
    auto t = DetectChatTemplate(source.get<std::string>(), "");
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    if (t->kind == ChatTemplateKind::kHarmony) t->harmony_date = v["harmony_date"];
    templates[name] = *t;
  }
  ASSERT_GT(v["cases"].size(), 180u);
  int passed = 0;
  for (const auto& c : v["cases"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string name = c["template"];
    const bool gen = c["add_generation_prompt"];
    auto rendered = RenderChat(templates.at(name), messages, gen);
    const std::string where = name + " case " + c["messages"].dump() + (gen ? " +gen" : "");
    if (c.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << where;
      if (!rendered.ok()) {
        EXPECT_EQ(rendered.status().code(), ErrorCode::kInvalidArgument);
        EXPECT_EQ(rendered.status().message(), c["error"].get<std::string>());
        ++passed;
      }
      continue;
    }
    ASSERT_TRUE(rendered.ok()) << where << ": " << rendered.status().ToString();
    EXPECT_EQ(*rendered, c["rendered"].get<std::string>()) << where;
    passed += *rendered == c["rendered"].get<std::string>();
  }
  RecordProperty("vectors_passed", passed);
}

TEST(ChatTemplate, KindOverload) {
  const std::vector<ChatMessage> messages = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(*RenderChat(ChatTemplateKind::kChatMl, messages, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*RenderChat(ChatTemplateKind::kLlama3, messages, false),
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>");
  EXPECT_EQ(*RenderChat(ChatTemplateKind::kGemma, messages, true),
            "<start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(*RenderChat(ChatTemplateKind::kLlama31, messages, true),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 3.1's template renders tool results from tool definitions and calls that ChatMessage does
// not carry: kvmem refuses them instead of writing a turn the model was not trained on. The
// system turn is there even without messages (where the official template fails on messages[0]).
TEST(ChatTemplate, Llama31RefusesToolMessages) {
  for (const char* role : {"tool", "ipython"}) {
    const std::vector<ChatMessage> messages = {{"user", "U"}, {role, "{\"x\": 1}"}};
    auto r = RenderChat(ChatTemplateKind::kLlama31, messages, true);
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported) << role;
  }
  EXPECT_EQ(*RenderChat(ChatTemplateKind::kLlama31, {}, false),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\n<|eot_id|>");
}

// Detection reads the fallback date from the source, and refuses a template that names a
// knowledge date but whose system turn is not Meta's, rather than rendering it as Meta's.
TEST(ChatTemplate, Llama31DetectionIsStrict) {
  const auto v = testing::LoadVectors("chat_template_vectors.json");
  const std::string official = v["templates"]["llama3.1"];
  const auto variant = [&](std::string_view from, std::string_view to) {
    std::string s = official;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return DetectChatTemplate(s, "llama");
  };
  auto dated = variant("\"26 Jul 2024\"", "'01 Jan 2025'");
  ASSERT_TRUE(dated.ok()) << dated.status().ToString();
  EXPECT_EQ(dated->llama31_date, "01 Jan 2025");
  EXPECT_EQ(variant("December 2023", "December 2024").status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(
      variant("set system_message = \"\"", "set system_message = \"Be kind.\"").status().code(),
      ErrorCode::kUnsupported);
  EXPECT_EQ(variant("{%- set date_string = \"26 Jul 2024\" %}", "").status().code(),
            ErrorCode::kUnsupported);
  EXPECT_EQ(variant("| trim + '<|eot_id|>'", "+ '<|eot_id|>'").status().code(),
            ErrorCode::kUnsupported);
  EXPECT_EQ(
      DetectChatTemplate("<|start_header_id|> Cutting Knowledge Date", "llama").status().code(),
      ErrorCode::kUnsupported);
}

TEST(ChatTemplate, DetectionFallbacksAndErrors) {
  EXPECT_EQ(DetectChatTemplate("", "gemma3")->kind, ChatTemplateKind::kGemma);
  EXPECT_EQ(DetectChatTemplate("", "qwen2")->default_system_prompt, kQwen2SystemPrompt);
  EXPECT_EQ(DetectChatTemplate("", "llama").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(DetectChatTemplate("{{ '[INST] ' + x }}", "llama").status().code(),
            ErrorCode::kUnsupported);
  // Plain ChatML: no default system prompt.
  auto plain = DetectChatTemplate(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
      "");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->default_system_prompt, "");
  // Gemma-2's template refuses a system message.
  auto gemma2 = DetectChatTemplate(
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') "
      "}}{% endif %}<start_of_turn>",
      "gemma2");
  ASSERT_TRUE(gemma2.ok());
  EXPECT_FALSE(gemma2->gemma_system_supported);
  const std::vector<ChatMessage> with_system = {{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(RenderChat(*gemma2, with_system, true).status().code(), ErrorCode::kInvalidArgument);
}

// Every message each family renders (and its generation prompt, and Llama 3.1's system turn)
// begins with a piece that opens a message; the pieces that close one, and ordinary text, do not.
TEST(ChatTemplate, MessageOpenersAreRecognized) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "?"}};
  struct Opener {
    ChatTemplateKind kind;
    const char* piece;
    size_t added_turns;  // turns the template writes on its own
  };
  const Opener openers[] = {{ChatTemplateKind::kChatMl, "<|im_start|>", 0},
                            {ChatTemplateKind::kLlama3, "<|start_header_id|>", 0},
                            {ChatTemplateKind::kLlama31, "<|start_header_id|>", 1},
                            {ChatTemplateKind::kGemma, "<start_of_turn>", 0}};
  for (const auto& [kind, opener, added_turns] : openers) {
    const std::string text = *RenderChat(kind, messages, true);
    size_t n = 0;
    for (size_t at = text.find(opener); at != std::string::npos; at = text.find(opener, at + 1)) {
      ++n;
    }
    EXPECT_EQ(n, messages.size() + added_turns + 1) << ChatTemplateKindName(kind);
    EXPECT_TRUE(text.starts_with(opener)) << ChatTemplateKindName(kind);
    EXPECT_TRUE(OpensChatMessage(opener));
  }
  for (const char* other : {"<|im_end|>", "<|end_header_id|>", "<|eot_id|>", "<end_of_turn>",
                            "<bos>", "user", "", "<|im_start|>user"}) {
    EXPECT_FALSE(OpensChatMessage(other)) << other;
  }
}

TEST(ChatTemplate, TrimMatchesPython) {
  EXPECT_EQ(TrimPythonWhitespace("  a b \n"), "a b");
  EXPECT_EQ(TrimPythonWhitespace("\xE3\x80\x80x\xC2\xA0\x1C"), "x");  // U+3000, NBSP, U+001C
  EXPECT_EQ(TrimPythonWhitespace("\xE2\x80\x8Bx"), "\xE2\x80\x8Bx");  // ZWSP is not space
  EXPECT_EQ(TrimPythonWhitespace(" \t "), "");
  EXPECT_EQ(TrimPythonWhitespace(""), "");
}

}  // namespace
}  // namespace kvmem::tokenizer
