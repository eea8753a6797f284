// Anthropic request validation and response formats, without HTTP.
#include "serve/anthropic_api.h"

#include <gtest/gtest.h>

#include <string>

#include "serve_test_util.h"

namespace kvmem::serve {
namespace {

using testing::Ctx;
using testing::ParseSse;

Result<ParsedRequest> Parse(const std::string& body) { return ParseMessagesRequest(body, Ctx()); }

GenerationResult Finished(FinishReason reason, std::string stop = "") {
  GenerationResult r;
  r.finish_reason = reason;
  r.stop_sequence = std::move(stop);
  r.usage = Usage{.prompt_tokens = 10, .cached_tokens = 4, .completion_tokens = 3};
  return r;
}

TEST(AnthropicRequest, Full) {
  auto r = Parse(R"({
    "model": "claude-x", "max_tokens": 64,
    "system": [{"type": "text", "text": "sys1", "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": "sys2"}],
    "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
      {"role": "user", "content": "more"}],
    "stop_sequences": ["END"], "temperature": 1, "top_p": 0.5, "top_k": 3,
    "stream": true, "metadata": {"user_id": "agent-7"}, "tool_choice": {"type": "auto"},
    "thinking": {"type": "disabled"}, "service_tier": "auto"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GenerationRequest& g = r->generation;
  ASSERT_EQ(g.messages.size(), 4u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[0].content, "sys1\nsys2");
  EXPECT_EQ(g.messages[2].role, "assistant");
  EXPECT_EQ(g.messages[2].content, "hello");
  EXPECT_FALSE(g.continue_final_message);
  EXPECT_EQ(g.max_tokens, 64);
  EXPECT_EQ(g.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(*g.sampling.top_k, 3);
  EXPECT_EQ(g.agent.id, "agent-7");
  EXPECT_EQ(g.agent.tenant, "t1");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(g.request_id.starts_with("msg_"));
  EXPECT_EQ(r->reply->dialect(), Dialect::kAnthropic);
}

TEST(AnthropicRequest, FinalAssistantMessageIsAPrefill) {
  auto r = Parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": "The"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->generation.continue_final_message);
  EXPECT_EQ(r->generation.messages.back().content, "The");
}

TEST(AnthropicRequest, RejectsMalformed) {
  struct Case {
    const char* body;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "user", "content": "x"}]})", "'max_tokens': required"},
      {R"({"max_tokens": "x", "messages": [{"role": "user", "content": "x"}]})",
       "'max_tokens': expected an integer, got string"},
      {R"({"max_tokens": -3, "messages": [{"role": "user", "content": "x"}]})",
       "'max_tokens': must be at least 1"},
      {R"({"max_tokens": 5000, "messages": [{"role": "user", "content": "x"}]})", "context length"},
      {R"({"max_tokens": 5})", "'messages': required"},
      {R"({"max_tokens": 5, "messages": 5})", "'messages': expected an array"},
      {R"({"max_tokens": 5, "messages": []})", "'messages': must not be empty"},
      {R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})",
       "'messages[0].role': must be user or assistant"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       "'messages[0].content[0].type'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "system": 5})",
       "'system'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 1.5})",
       "'temperature': must be in [0, 1]"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "stop_sequences": "END"})",
       "'stop_sequences': expected an array of strings"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "metadata": 1})",
       "'metadata'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "metadata": {"user_id": 5}})",
       "'metadata.user_id'"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "tools": [{"name": "t"}]})",
       "'tools[0].input_schema': required"},
      {R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
           "thinking": {"type": "enabled", "budget_tokens": 1024}})",
       "'thinking'"},
  };
  for (const Case& c : cases) {
    auto r = Parse(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(HttpStatus(ApiErrorFromStatus(r.status()).kind, Dialect::kAnthropic), 400);
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.body << "\n  got: " << r.status().message();
  }
}

TEST(AnthropicReply, MessageObject) {
  auto reply = MakeMessagesReply(ResponseMeta{"msg_1", 5, "fake-model"});
  const Json j = Json::parse(reply->Complete("Hi!", Finished(FinishReason::kStopSequence, "END")));
  EXPECT_EQ(j, Json::parse(R"({
    "id": "msg_1", "type": "message", "role": "assistant", "model": "fake-model",
    "content": [{"type": "text", "text": "Hi!"}],
    "stop_reason": "stop_sequence", "stop_sequence": "END",
    "usage": {"input_tokens": 6, "cache_creation_input_tokens": 0,
              "cache_read_input_tokens": 4, "output_tokens": 3}})"));
  const Json end_turn = Json::parse(reply->Complete("", Finished(FinishReason::kEndOfTurn)));
  EXPECT_EQ(end_turn["stop_reason"], "end_turn");
  EXPECT_TRUE(end_turn["stop_sequence"].is_null());
  EXPECT_EQ(end_turn["content"], Json::array());
  EXPECT_EQ(Json::parse(reply->Complete("x", Finished(FinishReason::kLength)))["stop_reason"],
            "max_tokens");
}

TEST(AnthropicReply, StreamEventsInOrder) {
  auto reply = MakeMessagesReply(ResponseMeta{"msg_1", 5, "fake-model"});
  // One call per statement: the reply keeps state (its open content block), and the operands
  // of + are unsequenced.
  std::string sse = reply->StreamStart(PromptInfo{.prompt_tokens = 10, .cached_tokens = 4});
  sse += reply->StreamText("Hel");
  sse += reply->StreamText("");
  sse += reply->StreamText("lo");
  sse += reply->StreamEnd(Finished(FinishReason::kLength));
  const auto events = ParseSse(sse);
  const std::vector<std::string> names = {
      "message_start",       "content_block_start", "ping",          "content_block_delta",
      "content_block_delta", "content_block_stop",  "message_delta", "message_stop"};
  ASSERT_EQ(events.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(events[i].event, names[i]);
    // Each data object repeats its event name as "type", which the clients dispatch on.
    EXPECT_EQ(Json::parse(events[i].data)["type"], names[i]);
  }
  const Json start = Json::parse(events[0].data)["message"];
  EXPECT_EQ(start["id"], "msg_1");
  EXPECT_EQ(start["type"], "message");
  EXPECT_EQ(start["role"], "assistant");
  EXPECT_EQ(start["content"], Json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(start["usage"]["input_tokens"], 6);
  EXPECT_EQ(start["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(Json::parse(events[1].data), Json::parse(R"({"type":"content_block_start","index":0,
                            "content_block":{"type":"text","text":""}})"));
  EXPECT_EQ(Json::parse(events[3].data), Json::parse(R"({"type":"content_block_delta","index":0,
                            "delta":{"type":"text_delta","text":"Hel"}})"));
  EXPECT_EQ(Json::parse(events[5].data), Json::parse(R"({"type":"content_block_stop","index":0})"));
  const Json delta = Json::parse(events[6].data);
  EXPECT_EQ(delta["delta"], Json::parse(R"({"stop_reason":"max_tokens","stop_sequence":null})"));
  EXPECT_EQ(delta["usage"]["output_tokens"], 3);
  EXPECT_EQ(delta["usage"]["input_tokens"], 6);
}

TEST(AnthropicReply, StreamErrorEvent) {
  auto reply = MakeMessagesReply(ResponseMeta{"msg_1", 5, "m"});
  const auto events = ParseSse(reply->StreamError({ApiErrorKind::kOverloaded, "busy"}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "error");
  EXPECT_EQ(
      Json::parse(events[0].data),
      Json::parse(R"({"type":"error","error":{"type":"overloaded_error","message":"busy"}})"));
}

TEST(AnthropicReply, Models) {
  const Json list = Json::parse(AnthropicModelList(ModelInfo{"fake-model", 4096, 0}));
  EXPECT_EQ(list["data"][0]["type"], "model");
  EXPECT_EQ(list["data"][0]["id"], "fake-model");
  EXPECT_EQ(list["data"][0]["created_at"], "1970-01-01T00:00:00Z");
  EXPECT_EQ(list["has_more"], false);
  EXPECT_EQ(list["first_id"], "fake-model");
}

}  // namespace
}  // namespace kvmem::serve
