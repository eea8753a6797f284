// The generic tool format (serve/tool_calls.h): its grammar, the incremental output parser, and
// the rendering that gives an agent's next turn its cached prefix back byte for byte.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/grammar/matcher.h"

namespace kvmem::serve {
namespace {

using engine::grammar::Matcher;

ToolRequest WeatherTools() {
  ToolRequest r;
  r.tools.push_back({.name = "get_weather",
                     .description = "Weather of a city",
                     .parameters = Json::parse(R"({"type":"object","properties":{
                         "city":{"type":"string"},"unit":{"enum":["c","f"]}},
                         "required":["city","unit"]})"),
                     .strict = true,
                     .field = "tools[0].function.parameters"});
  r.tools.push_back({.name = "get_time",
                     .parameters = Json::parse(R"({"type":"object","properties":{
                         "zone":{"$ref":"#/$defs/zone"}},"required":["zone"],
                         "$defs":{"zone":{"type":"string","maxLength":8}}})"),
                     .field = "tools[1].function.parameters"});
  return r;
}

bool Accepts(const ToolRequest& request, const std::string& text) {
  auto g = ToolOutputGrammar(request);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return false;
  Matcher m(*g);
  return m.AcceptBytes(text) && m.IsComplete();
}

const std::string kCall =
    R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}]})";
const std::string kTwoCalls =
    R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}},)"
    R"({"name":"get_time","arguments":{"zone":"CET"}}]})";
const std::string kReply = R"({"response":"It is \"warm\".\nOK"})";

TEST(ToolGrammar, AutoAllowsCallsOrAReplyInOneSpelling) {
  const ToolRequest r = WeatherTools();
  EXPECT_TRUE(Accepts(r, kCall));
  EXPECT_TRUE(Accepts(r, kTwoCalls));
  EXPECT_TRUE(Accepts(r, kReply));
  // No whitespace outside strings, keys in order, arguments held to the tool's schema.
  EXPECT_FALSE(Accepts(r, R"({"tool_calls": [{"name":"get_weather","arguments":{"city":"P","unit":"c"}}]})"));
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[{"arguments":{"city":"P","unit":"c"},"name":"get_weather"}]})"));
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"P"}}]})"));
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"P","unit":"k"}}]})"));
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[{"name":"nope","arguments":{}}]})"));
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[]})"));
  // The second tool's $ref into its own $defs still works inside the shared root.
  EXPECT_FALSE(Accepts(r, R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"TOOLONGZONE"}}]})"));
}

TEST(ToolGrammar, ChoiceNarrowsTheGrammar) {
  ToolRequest r = WeatherTools();
  r.choice.mode = ToolChoiceMode::kNone;
  EXPECT_FALSE(Accepts(r, kCall));
  EXPECT_TRUE(Accepts(r, kReply));
  r.choice.mode = ToolChoiceMode::kRequired;
  EXPECT_TRUE(Accepts(r, kTwoCalls));
  EXPECT_FALSE(Accepts(r, kReply));
  r.parallel = false;
  EXPECT_TRUE(Accepts(r, kCall));
  EXPECT_FALSE(Accepts(r, kTwoCalls));
  r.parallel = true;
  r.choice = {.mode = ToolChoiceMode::kNamed, .name = "get_time"};
  EXPECT_FALSE(Accepts(r, kCall));
  EXPECT_TRUE(Accepts(r, R"({"tool_calls":[{"name":"get_time","arguments":{"zone":"CET"}}]})"));
}

TEST(ToolGrammar, StrictToolsWithUnsupportedSchemasAreRefused) {
  ToolRequest r = WeatherTools();
  r.tools[0].parameters = Json::parse(R"({"type":"object","properties":{"n":{"type":"integer","minimum":1}}})");
  auto g = ToolOutputGrammar(r);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'tools[0].function.parameters'"), std::string::npos);
  EXPECT_NE(g.status().message().find("minimum"), std::string::npos);
  r.tools[0].strict = false;  // then its arguments are any object
  EXPECT_TRUE(Accepts(r, R"({"tool_calls":[{"name":"get_weather","arguments":{"n":0,"x":[1]}}]})"));
}

std::vector<ToolEvent> ParseInPieces(const std::string& text, size_t piece,
                                     ToolOutputParser* parser) {
  std::vector<ToolEvent> events;
  for (size_t i = 0; i < text.size(); i += piece) parser->Push(text.substr(i, piece), &events);
  parser->Finish(&events);
  return events;
}

TEST(ToolOutputParser, ReplyTextIsUnescapedAsItComes) {
  const std::string text = R"({"response":"a\"b\\c\nd \u00e9 \ud83d\ude00 \/"})";
  for (size_t piece : {1, 2, 3, 7, 100}) {
    ToolOutputParser p("call_");
    std::string got;
    for (const ToolEvent& e : ParseInPieces(text, piece, &p)) {
      ASSERT_EQ(e.kind, ToolEvent::Kind::kText);
      got += e.text;
    }
    EXPECT_EQ(got, "a\"b\\c\nd \xC3\xA9 \xF0\x9F\x98\x80 /") << "piece " << piece;
    EXPECT_TRUE(p.complete_calls().empty());
  }
}

TEST(ToolOutputParser, CallsStartThenStreamTheirArguments) {
  for (size_t piece : {1, 4, 1000}) {
    ToolOutputParser p("toolu_");
    const std::vector<ToolEvent> events = ParseInPieces(kTwoCalls, piece, &p);
    std::vector<std::string> names, args(2);
    for (const ToolEvent& e : events) {
      if (e.kind == ToolEvent::Kind::kCallStart) {
        EXPECT_EQ(e.index, static_cast<int>(names.size()));
        EXPECT_EQ(e.call.id.rfind("toolu_", 0), 0u);
        names.push_back(e.call.name);
      } else {
        ASSERT_EQ(e.kind, ToolEvent::Kind::kCallArguments);
        args[e.index] += e.text;
      }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "get_time"}));
    EXPECT_EQ(args[0], R"({"city":"Paris","unit":"c"})");
    EXPECT_EQ(args[1], R"({"zone":"CET"})");
    ASSERT_EQ(p.complete_calls().size(), 2u);
    EXPECT_NE(p.complete_calls()[0].id, p.complete_calls()[1].id);
    EXPECT_EQ(p.complete_calls()[1].arguments, args[1]);
  }
}

TEST(ToolOutputParser, CutOffCallsAreNotComplete) {
  ToolOutputParser p("call_");
  std::vector<ToolEvent> events;
  p.Push(kTwoCalls.substr(0, kTwoCalls.size() - 10), &events);
  p.Finish(&events);
  EXPECT_EQ(p.complete_calls().size(), 1u);
}

TEST(ToolOutputParser, TextOutsideTheFormatPassesThrough) {
  ToolOutputParser p("call_");
  std::string got;
  for (const ToolEvent& e : ParseInPieces("Hello {\"x\"", 2, &p)) got += e.text;
  EXPECT_EQ(got, "Hello {\"x\"");
  ToolOutputParser q("call_");
  got.clear();
  for (const ToolEvent& e : ParseInPieces("{\"resp", 3, &q)) got += e.text;
  EXPECT_EQ(got, "{\"resp");
}

// What the model wrote comes back from the client as calls (OpenAI: arguments verbatim;
// Anthropic: the input object, serialized with its keys in order) and renders to the same bytes.
TEST(ToolRendering, AssistantTurnsRenderAsTheModelWroteThem) {
  const ToolRequest r = WeatherTools();
  for (const std::string& output : {kCall, kTwoCalls, kReply}) {
    ToolOutputParser p("call_");
    std::string text;
    for (const ToolEvent& e : ParseInPieces(output, 5, &p)) {
      if (e.kind == ToolEvent::Kind::kText) text += e.text;
    }
    std::vector<ToolCall> calls = p.complete_calls();
    for (ToolCall& c : calls) c.arguments = Json::parse(c.arguments).dump();  // as Anthropic's
    const std::vector<ToolTurn> turns = {{.role = "user", .text = "hi"},
                                         {.role = "assistant", .text = text, .calls = calls}};
    const std::vector<ChatMessage> messages = RenderToolConversation(r, turns);
    ASSERT_EQ(messages.size(), 3u);
    EXPECT_EQ(messages[2].content, output);
  }
}

TEST(ToolRendering, ToolsJoinTheSystemMessageAndResultsShareAUserTurn) {
  const ToolRequest r = WeatherTools();
  const std::vector<ToolTurn> turns = {
      {.role = "system", .text = "Be brief."},
      {.role = "user", .text = "Weather and time in Paris?"},
      {.role = "assistant",
       .calls = {{"call_1", "get_weather", R"({"city":"Paris","unit":"c"})"},
                 {"call_2", "get_time", R"({"zone":"CET"})"}}},
      {.role = "tool", .text = "18 C", .tool_call_id = "call_1"},
      {.role = "tool", .text = "12:00", .tool_call_id = "call_2", .is_error = true},
  };
  const std::vector<ChatMessage> m = RenderToolConversation(r, turns);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content.rfind("Be brief.\n\nYou can call tools.", 0), 0u);
  EXPECT_NE(m[0].content.find(R"({"description":"Weather of a city","name":"get_weather",)"),
            std::string::npos);
  EXPECT_EQ(m[3].role, "user");
  EXPECT_EQ(m[3].content,
            R"({"tool_response":{"name":"get_weather","content":"18 C"}})"
            "\n"
            R"({"tool_response":{"name":"get_time","content":"12:00","is_error":true}})");
}

TEST(ToolRendering, ValidatesNames) {
  EXPECT_TRUE(ValidateToolName("get-weather_2", "f").ok());
  EXPECT_FALSE(ValidateToolName("", "f").ok());
  EXPECT_FALSE(ValidateToolName("a b", "f").ok());
  EXPECT_FALSE(ValidateToolName(std::string(65, 'a'), "f").ok());
}

}  // namespace
}  // namespace kvmem::serve
