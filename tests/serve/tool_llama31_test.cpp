// Tools in Llama 3.1's own format (serve/llama31_tools.h, tokenizer/llama31_tools.h): the prompt
// against the official templates rendered by jinja2 (scripts/make_llama31_tool_vectors.py), the
// call grammar, the reader of the model's output, and the byte-for-byte round trip.
#include "serve/llama31_tools.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/grammar/matcher.h"
#include "serve/openai_api.h"
#include "serve_test_util.h"
#include "tool_test_util.h"
#include "tokenizer/llama31_tools.h"

namespace kvmem::serve {
namespace {

using testing::LoadToolVectors;
using testing::OJson;
using testing::ToolRequestOf;
using testing::ToolTurnsOf;

OJson LoadVectors() { return LoadToolVectors("llama31_tool_vectors.json"); }

TEST(Llama31Tools, PromptMatchesTheOfficialTemplates) {
  const OJson v = LoadVectors();
  ASSERT_FALSE(v["cases"].empty());
  const ToolRequest request = ToolRequestOf(v["tools"]);
  for (const OJson& c : v["cases"]) {
    GenerationRequest g;
    ASSERT_TRUE(ApplyTools(ToolFormat::kLlama31, request, ToolTurnsOf(c["messages"]), &g).ok());
    ASSERT_TRUE(g.template_tools.has_value());
    EXPECT_EQ(g.grammar, nullptr);  // tool_choice auto: the model may answer in text
    auto text = tokenizer::RenderLlama31WithTools(
        tokenizer::ChatTemplateFor(tokenizer::ChatTemplateKind::kLlama31), g.messages,
        *g.template_tools, true);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, c["rendered"].get<std::string>()) << c["template"] << " " << c["messages"];
  }
}

std::vector<ToolEvent> Read(const std::string& output, ToolOutputParser* p) {
  std::vector<ToolEvent> events;
  for (size_t i = 0; i < output.size(); i += 3) p->Push(output.substr(i, 3), &events);
  p->Finish(&events);
  return events;
}

TEST(Llama31Tools, ReadsCallsAndText) {
  const std::string call = R"({"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}})";
  ToolOutputParser p("call_", ToolFormat::kLlama31);
  const auto events = Read(" " + call, &p);
  ASSERT_EQ(p.complete_calls().size(), 1u);
  EXPECT_EQ(p.complete_calls()[0].name, "get_weather");
  EXPECT_EQ(p.complete_calls()[0].arguments, R"({"city": "Paris", "unit": "c"})");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ToolEvent::Kind::kCallStart);

  // The call comes back from the client and is rendered as the model wrote it.
  const OJson v = LoadVectors();
  GenerationRequest g;
  std::vector<ToolTurn> turns = {{.role = "user", .text = "Weather?"},
                                 {.role = "assistant", .calls = p.complete_calls()},
                                 {.role = "tool", .text = "18 C", .tool_call_id = "x"}};
  ASSERT_TRUE(ApplyTools(ToolFormat::kLlama31, ToolRequestOf(v["tools"]), turns, &g).ok());
  EXPECT_EQ(g.messages[1].content, call);
  EXPECT_EQ(g.messages[2].role, "ipython");
  EXPECT_EQ(g.messages[2].content, "\"18 C\"");

  for (const std::string& text : {std::string("It is sunny."), std::string("{not json"),
                                  std::string(R"({"answer": 1})")}) {
    ToolOutputParser q("call_", ToolFormat::kLlama31);
    std::string got;
    for (const ToolEvent& e : Read(text, &q)) {
      EXPECT_EQ(e.kind, ToolEvent::Kind::kText);
      got += e.text;
    }
    EXPECT_EQ(got, text);
    EXPECT_TRUE(q.complete_calls().empty());
  }
}

TEST(Llama31Tools, RequiredCallsAreHeldToTheSchemas) {
  ToolRequest r = ToolRequestOf(LoadVectors()["tools"]);
  r.choice.mode = ToolChoiceMode::kRequired;
  GenerationRequest g;
  ASSERT_TRUE(ApplyTools(ToolFormat::kLlama31, r, {{.role = "user", .text = "x"}}, &g).ok());
  ASSERT_NE(g.grammar, nullptr);
  const auto accepts = [&](const std::string& text) {
    engine::grammar::Matcher m(g.grammar);
    return m.AcceptBytes(text) && m.IsComplete();
  };
  EXPECT_TRUE(accepts(R"({"name": "get_weather", "parameters": {"city": "Paris"}})"));
  EXPECT_TRUE(accepts(R"({"name": "get_time", "parameters": {}})"));
  EXPECT_FALSE(accepts(R"({"name": "get_weather", "parameters": {}})"));
  EXPECT_FALSE(accepts("Sunny."));

  std::vector<ToolTurn> two = {{.role = "user", .text = "x"},
                               {.role = "assistant",
                                .calls = {{"a", "get_time", "{}"}, {"b", "get_time", "{}"}}}};
  GenerationRequest fresh;
  const Status s = ApplyTools(ToolFormat::kLlama31, r, two, &fresh);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'messages[1]'"), std::string::npos) << s.message();
}

TEST(Llama31Tools, OpenAiRequestsTakeTheModelsFormat) {
  RequestContext ctx = testing::Ctx();
  ctx.model.tool_format = ToolFormat::kLlama31;
  auto r = ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})", ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->generation.template_tools.has_value());
  EXPECT_EQ(r->generation.template_tools->size(), 1u);
  const Json body = Json::parse(r->reply->Complete(R"({"name": "f", "parameters": {"a": [1, 2]}})",
                                                   GenerationResult{}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"a": [1, 2]})");
}

}  // namespace
}  // namespace kvmem::serve
