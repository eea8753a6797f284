// Tools in Qwen 2.5/3's own format (serve/qwen_tools.h, tokenizer/qwen_tools.h): the prompt
// against the official templates rendered by jinja2 (scripts/make_tool_template_vectors.py), the
// template's detection, the call grammar, the reader of the model's output, and the byte-for-byte
// round trip of a call the model wrote.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/grammar/matcher.h"
#include "serve/openai_api.h"
#include "serve/qwen_tools.h"
#include "serve_test_util.h"
#include "tool_test_util.h"
#include "tokenizer/qwen_tools.h"

namespace kvmem::serve {
namespace {

using testing::LoadToolVectors;
using testing::OJson;
using testing::ReadTestFile;
using testing::ToolRequestOf;
using testing::ToolTurnsOf;

OJson LoadVectors() { return LoadToolVectors("qwen_tool_vectors.json"); }

tokenizer::ChatTemplate TemplateOf(const std::string& name) {
  const std::string source = ReadTestFile("tokenizer/chat_templates/" + name + ".jinja");
  auto t = tokenizer::DetectChatTemplate(source, "");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : tokenizer::ChatTemplate{};
}

TEST(QwenTools, TemplatesAreRecognized) {
  EXPECT_TRUE(TemplateOf("qwen2.5").qwen_tools);
  EXPECT_EQ(TemplateOf("qwen2.5").default_system_prompt,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_TRUE(TemplateOf("qwen3").qwen_tools);
  EXPECT_EQ(TemplateOf("qwen3").default_system_prompt, "");
  // Plain ChatML (SmolLM2's) has no tool format of its own.
  EXPECT_FALSE(tokenizer::ChatTemplateFor(tokenizer::ChatTemplateKind::kChatMl).qwen_tools);
}

TEST(QwenTools, PromptMatchesTheOfficialTemplates) {
  const OJson v = LoadVectors();
  ASSERT_FALSE(v["cases"].empty());
  const ToolRequest request = ToolRequestOf(v["tools"]);
  for (const OJson& c : v["cases"]) {
    GenerationRequest g;
    ASSERT_TRUE(ApplyTools(ToolFormat::kQwen, request, ToolTurnsOf(c["messages"]), &g).ok());
    ASSERT_TRUE(g.template_tools.has_value());
    EXPECT_EQ(g.grammar, nullptr);  // tool_choice auto: the model may answer in text
    auto text = tokenizer::RenderQwenWithTools(TemplateOf(c["template"]), g.messages,
                                               *g.template_tools, true);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, c["rendered"].get<std::string>()) << c["template"] << " " << c["messages"];
  }
}

std::vector<ToolEvent> Read(const std::string& output, ToolOutputParser* p, size_t step) {
  std::vector<ToolEvent> events;
  for (size_t i = 0; i < output.size(); i += step) p->Push(output.substr(i, step), &events);
  p->Finish(&events);
  return events;
}

std::string TextOf(const std::vector<ToolEvent>& events) {
  std::string text;
  for (const ToolEvent& e : events) {
    if (e.kind == ToolEvent::Kind::kText) text += e.text;
  }
  return text;
}

TEST(QwenTools, ReadsTextAndCallsInAnyPieces) {
  const std::string output =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", "
      "\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "{}}\n</tool_call>\n";
  for (size_t step : {1, 2, 5, 11, 1000}) {
    ToolOutputParser p("call_", ToolFormat::kQwen);
    const auto events = Read(output, &p, step);
    EXPECT_EQ(TextOf(events), "Checking.") << step;
    ASSERT_EQ(p.complete_calls().size(), 2u) << step;
    EXPECT_EQ(p.complete_calls()[0].name, "get_weather");
    EXPECT_EQ(p.complete_calls()[0].arguments, R"({"unit": "c", "city": "Paris"})");
    EXPECT_EQ(p.complete_calls()[1].name, "get_time");
    EXPECT_EQ(p.complete_calls()[1].arguments, "{}");
    EXPECT_NE(p.complete_calls()[0].id, p.complete_calls()[1].id);
  }
  // Text that only looks like a block's start, a block that is not a call, one never closed.
  for (const std::string& text :
       {std::string("a < b\nand <tool c"), std::string("x\n<tool_call>\n[1, 2]\n</tool_call>"),
        std::string("<tool_call>\n{\"name\": \"f\", \"argu"), std::string("line\n\n")}) {
    for (size_t step : {1, 3, 1000}) {
      ToolOutputParser q("call_", ToolFormat::kQwen);
      const auto events = Read(text, &q, step);
      const std::string expected =
          text.starts_with("x\n") ? "x<tool_call>\n[1, 2]\n</tool_call>" : text;
      EXPECT_EQ(TextOf(events), expected) << step;
      EXPECT_TRUE(q.complete_calls().empty());
    }
  }
}

TEST(QwenTools, ACallTheModelWroteRendersByteForByte) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": "
      "\"Par\\u00eds\"}}\n</tool_call>";
  ToolOutputParser p("call_", ToolFormat::kQwen);
  Read("Let me see.\n" + call, &p, 4);
  ASSERT_EQ(p.complete_calls().size(), 1u);
  std::vector<ToolTurn> turns = {
      {.role = "user", .text = "Weather?"},
      {.role = "assistant", .text = "Let me see.", .calls = p.complete_calls()},
      {.role = "tool", .text = "18 C", .tool_call_id = "x"}};
  GenerationRequest g;
  ASSERT_TRUE(ApplyTools(ToolFormat::kQwen, ToolRequestOf(LoadVectors()["tools"]), turns, &g).ok());
  // json.dumps with ensure_ascii=False writes the escape as the character itself.
  EXPECT_EQ(g.messages[1].content, "Let me see.\n" + call.substr(0, call.find("\\u00ed")) +
                                       "\u00ed" + call.substr(call.find("\\u00ed") + 6));
  auto text =
      tokenizer::RenderQwenWithTools(TemplateOf("qwen3"), g.messages, *g.template_tools, true);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>"),
            std::string::npos);
}

TEST(QwenTools, RequiredCallsAreHeldToTheSchemas) {
  ToolRequest r = ToolRequestOf(LoadVectors()["tools"]);
  r.choice.mode = ToolChoiceMode::kRequired;
  GenerationRequest g;
  ASSERT_TRUE(ApplyTools(ToolFormat::kQwen, r, {{.role = "user", .text = "x"}}, &g).ok());
  ASSERT_NE(g.grammar, nullptr);
  const auto accepts = [&](const std::string& text) {
    engine::grammar::Matcher m(g.grammar);
    return m.AcceptBytes(text) && m.IsComplete();
  };
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(accepts(weather));
  EXPECT_TRUE(accepts(weather + "\n" + time));
  EXPECT_FALSE(accepts(weather + time));  // blocks are separated by one newline
  EXPECT_FALSE(
      accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts("Sunny."));
  EXPECT_FALSE(accepts("<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));

  r.parallel = false;
  GenerationRequest one;
  ASSERT_TRUE(ApplyTools(ToolFormat::kQwen, r, {{.role = "user", .text = "x"}}, &one).ok());
  engine::grammar::Matcher m(one.grammar);
  EXPECT_FALSE(m.AcceptBytes(weather + "\n" + time) && m.IsComplete());
}

TEST(QwenTools, OpenAiRequestsTakeTheModelsFormat) {
  RequestContext ctx = testing::Ctx();
  ctx.model.tool_format = ToolFormat::kQwen;
  auto r = ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})",
                                      ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->generation.template_tools.has_value());
  EXPECT_EQ(r->generation.template_tools->size(), 1u);
  const Json body = Json::parse(r->reply->Complete(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>",
      GenerationResult{}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"a": [1, 2]})");
}

}  // namespace
}  // namespace kvmem::serve
