// Tools in GPT-OSS's harmony format (serve/harmony_tools.h, tokenizer/harmony.h): the prompt
// against the official template rendered by jinja2 (scripts/make_tool_template_vectors.py), and
// the reader of the model's reply with its special tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/harmony_tools.h"
#include "serve/openai_api.h"
#include "serve_test_util.h"
#include "tool_test_util.h"

namespace kvmem::serve {
namespace {

using testing::LoadToolVectors;
using testing::OJson;
using testing::ToolRequestOf;
using testing::ToolTurnsOf;

OJson LoadVectors() { return LoadToolVectors("harmony_tool_vectors.json"); }

TEST(HarmonyTools, PromptMatchesTheOfficialTemplate) {
  const OJson v = LoadVectors();
  ASSERT_FALSE(v["cases"].empty());
  tokenizer::ChatTemplate tmpl = tokenizer::ChatTemplateFor(tokenizer::ChatTemplateKind::kHarmony);
  tmpl.harmony_date = "2026-01-15";  // the script's strftime_now
  const ToolRequest request = ToolRequestOf(v["tools"]);
  for (const OJson& c : v["cases"]) {
    GenerationRequest g;
    ASSERT_TRUE(ApplyTools(ToolFormat::kHarmony, request, ToolTurnsOf(c["messages"]), &g).ok());
    ASSERT_TRUE(g.template_tools.has_value());
    EXPECT_TRUE(g.raw_reply);
    EXPECT_EQ(g.grammar, nullptr);
    auto text = tokenizer::RenderChatWithTools(tmpl, g.messages, *g.template_tools, true);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, c["rendered"].get<std::string>()) << c["messages"];
  }
}

TEST(HarmonyTools, RefusesWhatTheTemplateCannotSay) {
  const ToolRequest request = ToolRequestOf(LoadVectors()["tools"]);
  GenerationRequest g;
  const std::vector<ToolTurn> two = {
      {.role = "user", .text = "x"},
      {.role = "assistant", .calls = {{"a", "get_time", "{}"}, {"b", "get_time", "{}"}}}};
  const Status s = ApplyTools(ToolFormat::kHarmony, request, two, &g);
  EXPECT_NE(s.message().find("'messages[1]'"), std::string::npos) << s.message();
  // A result with no call before it: the template raises, so does the renderer.
  GenerationRequest r;
  ASSERT_TRUE(ApplyTools(ToolFormat::kHarmony, request,
                         {{.role = "user", .text = "x"}, {.role = "tool", .text = "18 C"}}, &r)
                  .ok());
  EXPECT_FALSE(tokenizer::RenderChatWithTools(
                   tokenizer::ChatTemplateFor(tokenizer::ChatTemplateKind::kHarmony), r.messages,
                   *r.template_tools, true)
                   .ok());
}

struct Read {
  std::vector<ToolEvent> events;
  std::vector<ToolCall> calls;
  std::string text;
};

Read ReadReply(const std::string& reply, size_t step) {
  ToolOutputParser p("call_", ToolFormat::kHarmony);
  Read r;
  for (size_t i = 0; i < reply.size(); i += step) p.Push(reply.substr(i, step), &r.events);
  p.Finish(&r.events);
  r.calls = p.complete_calls();
  for (const ToolEvent& e : r.events) {
    if (e.kind == ToolEvent::Kind::kText) r.text += e.text;
  }
  return r;
}

TEST(HarmonyTools, ReadsCallsWhereverTheRecipientIs) {
  for (const std::string& reply :
       {std::string("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
                    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                    "{\"city\":\"Paris\"}"),
        std::string(" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": "
                    "\"Paris\"}<|call|>")}) {
    for (size_t step : {1, 4, 1000}) {
      const Read r = ReadReply(reply, step);
      EXPECT_EQ(r.text, "") << reply;
      ASSERT_EQ(r.calls.size(), 1u) << reply;
      EXPECT_EQ(r.calls[0].name, "get_weather");
      EXPECT_EQ(r.calls[0].arguments, R"({"city": "Paris"})");
      EXPECT_TRUE(r.calls[0].id.starts_with("call_"));
    }
  }
}

TEST(HarmonyTools, ShowsOnlyTheFinalChannel) {
  const std::string reply =
      "<|channel|>analysis<|message|>Thinking <|about|> it.<|end|><|start|>assistant"
      "<|channel|>commentary<|message|>A preamble.<|end|><|start|>assistant<|channel|>final"
      "<|message|>It is <|noon> now.";
  for (size_t step : {1, 3, 7, 1000}) {
    const Read r = ReadReply(reply, step);
    EXPECT_EQ(r.text, "It is <|noon> now.") << step;
    EXPECT_TRUE(r.calls.empty());
  }
  // A reply that never opens a message is shown as it is.
  EXPECT_EQ(ReadReply("Plain words", 2).text, "Plain words");
}

TEST(HarmonyTools, OpenAiRequestsTakeTheModelsFormat) {
  RequestContext ctx = testing::Ctx();
  ctx.model.tool_format = ToolFormat::kHarmony;
  auto r = ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "description": "F"}}]})",
                                      ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->generation.template_tools.has_value());
  EXPECT_EQ(r->generation.template_tools->at(0),
            "## functions\n\nnamespace functions {\n\n// F\ntype f = () => any;\n\n} // namespace "
            "functions");
  EXPECT_TRUE(r->generation.raw_reply);
  const Json body = Json::parse(r->reply->Complete(
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":[1,2]}",
      GenerationResult{}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"a": [1, 2]})");
}

}  // namespace
}  // namespace kvmem::serve
