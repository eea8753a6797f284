// Tools and structured output through the dialects' parsers and replies, without HTTP.
#include <gtest/gtest.h>

#include <string>

#include "engine/grammar/matcher.h"
#include "serve/anthropic_api.h"
#include "serve/openai_api.h"
#include "serve_test_util.h"

namespace kvmem::serve {
namespace {

using testing::Ctx;
using testing::ParseSse;

const char* kOpenAiTools = R"("tools": [{"type": "function", "function": {"name": "add",
    "description": "Adds", "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
    "b": {"type": "integer"}}, "required": ["a", "b"]}}}])";

GenerationResult Ended(FinishReason reason) {
  GenerationResult r;
  r.finish_reason = reason;
  r.usage = {.prompt_tokens = 10, .cached_tokens = 0, .completion_tokens = 5};
  return r;
}

TEST(OpenAiTools, RequestRendersTheGenericFormat) {
  auto r = ParseChatCompletionRequest(std::string(R"({"messages": [
      {"role": "user", "content": "1+2?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
       "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}]},
      {"role": "tool", "tool_call_id": "call_9", "content": "3"}], )") +
                                          kOpenAiTools + "}",
                                      Ctx());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& m = r->generation.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[2].content, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})");
  EXPECT_EQ(m[3].content, R"({"tool_response":{"name":"add","content":"3"}})");
  EXPECT_NE(r->generation.grammar, nullptr);
}

TEST(OpenAiTools, RejectsMalformedTools) {
  struct Case {
    std::string extra;
    const char* message_part;
  };
  const Case cases[] = {
      {R"("tools": [{"type": "code", "function": {"name": "a"}}])", "'tools[0].type'"},
      {R"("tools": [{"type": "function", "function": {"name": "a b"}}])", "'tools[0].function.name'"},
      {R"("tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}])",
       "'tools[0].function.parameters'"},
      {R"("tools": [{"type": "function", "function": {"name": "a", "strict": true,
          "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "x"}}}}}])",
       "'tools[0].function.parameters': JSON schema at '/properties/x': keyword 'pattern'"},
      {std::string(kOpenAiTools) + R"(, "tool_choice": "sometimes")", "'tool_choice'"},
      {std::string(kOpenAiTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "sub"}})",
       "'tool_choice.function.name': no tool is named 'sub'"},
      {std::string(kOpenAiTools) + R"(, "response_format": {"type": "json_object"})",
       "'tools': cannot be combined"},
      {R"("tool_choice": "required", "tools": [])", "'tool_choice': 'required' needs tools"},
  };
  for (const Case& c : cases) {
    auto r = ParseChatCompletionRequest(
        R"({"messages": [{"role": "user", "content": "x"}], )" + c.extra + "}", Ctx());
    ASSERT_FALSE(r.ok()) << c.extra;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << r.status().message() << " should name " << c.message_part;
  }
}

TEST(OpenAiTools, WholeReplyCarriesCalls) {
  auto r = ParseChatCompletionRequest(
      std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + kOpenAiTools + "}", Ctx());
  ASSERT_TRUE(r.ok());
  const Json body = Json::parse(r->reply->Complete(
      R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})", Ended(FinishReason::kEndOfTurn)));
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "add");
  EXPECT_EQ(call["function"]["arguments"], R"({"a":1,"b":2})");

  auto text = ParseChatCompletionRequest(
      std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + kOpenAiTools + "}", Ctx());
  const Json reply = Json::parse(text->reply->Complete(R"({"response":"Hi"})", Ended(FinishReason::kEndOfTurn)));
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(reply["choices"][0]["message"]["content"], "Hi");
  EXPECT_FALSE(reply["choices"][0]["message"].contains("tool_calls"));
}

TEST(OpenAiTools, StreamSendsCallDeltas) {
  auto r = ParseChatCompletionRequest(
      std::string(R"({"stream": true, "messages": [{"role": "user", "content": "x"}], )") +
          kOpenAiTools + "}",
      Ctx());
  ASSERT_TRUE(r.ok());
  ReplyFormat& reply = *r->reply;
  std::string sse = reply.StreamStart({});
  const std::string out = R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})";
  for (size_t i = 0; i < out.size(); i += 6) sse += reply.StreamText(out.substr(i, 6));
  sse += reply.StreamEnd(Ended(FinishReason::kEndOfTurn));
  std::string args, finish;
  int starts = 0;
  for (const auto& e : ParseSse(sse)) {
    if (e.data == "[DONE]") continue;
    const Json c = Json::parse(e.data)["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    const Json& d = c["delta"]["tool_calls"][0];
    EXPECT_EQ(d["index"], 0);
    if (d.contains("id")) {
      ++starts;
      EXPECT_EQ(d["function"]["name"], "add");
    }
    args += d["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(args, R"({"a":1,"b":2})");
  EXPECT_EQ(finish, "tool_calls");
}

TEST(StructuredOutput, ResponseFormatAndGrammar) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto object = ParseChatCompletionRequest(
      "{" + msgs + R"(, "response_format": {"type": "json_object"}})", Ctx());
  ASSERT_TRUE(object.ok());
  EXPECT_NE(object->generation.grammar, nullptr);
  auto schema = ParseCompletionRequest(R"({"prompt": "p", "response_format": {"type": "json_schema",
      "json_schema": {"name": "s", "strict": true, "schema": {"type": "object",
      "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}, "required": ["z", "a"]}}}})",
                                       Ctx());
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  engine::grammar::Matcher m(schema->generation.grammar);
  EXPECT_TRUE(m.AcceptBytes(R"({"z": "q", "a": 1})"));  // the schema's order, not the names'
  auto gbnf = ParseChatCompletionRequest("{" + msgs + R"(, "grammar": "root ::= \"yes\" | \"no\""})", Ctx());
  ASSERT_TRUE(gbnf.ok());
  EXPECT_NE(gbnf->generation.grammar, nullptr);
  auto text = ParseChatCompletionRequest("{" + msgs + R"(, "response_format": {"type": "text"}})", Ctx());
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->generation.grammar, nullptr);

  struct Case {
    std::string extra;
    const char* message_part;
  };
  const Case cases[] = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema":
          {"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}}})",
       "'response_format.json_schema.schema': JSON schema at '/properties/age': keyword 'minimum' is "
       "not supported"},
      {R"("response_format": {"type": "json_schema"})", "'response_format.json_schema': required"},
      {R"("response_format": {"type": "yaml"})", "'response_format.type'"},
      {R"("grammar": "root ::= undefined")", "'grammar':"},
      {R"("grammar": "root ::= \"a\"", "response_format": {"type": "json_object"})",
       "'grammar': cannot be combined"},
  };
  for (const Case& c : cases) {
    auto r = ParseChatCompletionRequest("{" + msgs + ", " + c.extra + "}", Ctx());
    ASSERT_FALSE(r.ok()) << c.extra;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << r.status().message() << " should name " << c.message_part;
  }
}

const char* kAnthropicBody = R"({"max_tokens": 50, "system": "Be brief.",
    "tools": [{"name": "add", "input_schema": {"type": "object", "properties":
      {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": "1+2?"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "add",
                                         "input": {"b": 2, "a": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                    "content": [{"type": "text", "text": "3"}]},
                                   {"type": "text", "text": "And now?"}]}]})";

TEST(AnthropicTools, RequestRendersTheGenericFormat) {
  auto r = ParseMessagesRequest(kAnthropicBody, Ctx());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& m = r->generation.messages;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].content.rfind("Be brief.\n\nYou can call tools.", 0), 0u);
  EXPECT_EQ(m[2].content, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})");
  EXPECT_EQ(m[3].content, "{\"tool_response\":{\"name\":\"add\",\"content\":\"3\"}}\nAnd now?");
  ASSERT_NE(r->generation.grammar, nullptr);
  EXPECT_FALSE(r->generation.continue_final_message);
}

TEST(AnthropicTools, RepliesWithToolUseBlocks) {
  auto r = ParseMessagesRequest(kAnthropicBody, Ctx());
  ASSERT_TRUE(r.ok());
  const std::string out = R"({"tool_calls":[{"name":"add","arguments":{"a":3,"b":4}}]})";
  const Json whole = Json::parse(r->reply->Complete(out, Ended(FinishReason::kEndOfTurn)));
  EXPECT_EQ(whole["stop_reason"], "tool_use");
  ASSERT_EQ(whole["content"].size(), 1u);
  EXPECT_EQ(whole["content"][0]["type"], "tool_use");
  EXPECT_EQ(whole["content"][0]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(whole["content"][0]["input"], Json::parse(R"({"a":3,"b":4})"));

  auto s = ParseMessagesRequest(kAnthropicBody, Ctx());
  ReplyFormat& reply = *s->reply;
  std::string sse = reply.StreamStart({});
  for (size_t i = 0; i < out.size(); i += 5) sse += reply.StreamText(out.substr(i, 5));
  sse += reply.StreamEnd(Ended(FinishReason::kEndOfTurn));
  std::string partial;
  std::vector<std::string> names;
  for (const auto& e : ParseSse(sse)) {
    const Json d = Json::parse(e.data);
    if (e.event != "content_block_delta") names.push_back(e.event);
    if (e.event == "content_block_start") {
      EXPECT_EQ(d["index"], 0);
      EXPECT_EQ(d["content_block"]["type"], "tool_use");
      EXPECT_EQ(d["content_block"]["name"], "add");
    } else if (e.event == "content_block_delta") {
      EXPECT_EQ(d["delta"]["type"], "input_json_delta");
      partial += d["delta"]["partial_json"].get<std::string>();
    } else if (e.event == "message_delta") {
      EXPECT_EQ(d["delta"]["stop_reason"], "tool_use");
    }
  }
  EXPECT_EQ(partial, R"({"a":3,"b":4})");
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                             "content_block_stop", "message_delta",
                                             "message_stop"}));
}

TEST(AnthropicTools, RejectsMalformedTools) {
  struct Case {
    const char* body;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "web_search_20250305", "name": "w"}]})", "'tools[0].type'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "a", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "b"}})",
       "'tool_choice.name'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
       "'messages[0].content[0].tool_use_id': required"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
           {"role": "assistant", "content": "y"}], "tools": [{"name": "a", "input_schema": {}}]})",
       "prefill"},
  };
  for (const Case& c : cases) {
    auto r = ParseMessagesRequest(c.body, Ctx());
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << r.status().message() << " should name " << c.message_part;
  }
}

}  // namespace
}  // namespace kvmem::serve
