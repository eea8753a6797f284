// OpenAI request validation and response formats, without HTTP.
#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <string>

#include "serve_test_util.h"

namespace kvmem::serve {
namespace {

using testing::Ctx;
using testing::ParseSse;

Result<ParsedRequest> Chat(const std::string& body) {
  return ParseChatCompletionRequest(body, Ctx());
}

TEST(OpenAiRequest, MinimalChat) {
  auto r = Chat(R"({"model":"x","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GenerationRequest& g = r->generation;
  ASSERT_EQ(g.messages.size(), 1u);
  EXPECT_EQ(g.messages[0].role, "user");
  EXPECT_EQ(g.messages[0].content, "hi");
  EXPECT_FALSE(g.prompt.has_value());
  EXPECT_FALSE(g.max_tokens.has_value());
  EXPECT_FALSE(g.sampling.temperature.has_value());
  EXPECT_TRUE(g.stop.empty());
  EXPECT_EQ(g.agent.tenant, "t1");
  EXPECT_EQ(g.agent.id, "");
  EXPECT_FALSE(g.continue_final_message);
  EXPECT_FALSE(r->stream);
  EXPECT_TRUE(g.request_id.starts_with("chatcmpl-"));
  EXPECT_EQ(g.request_id.size(), 9u + 24u);
  ASSERT_NE(r->reply, nullptr);
  EXPECT_EQ(r->reply->dialect(), Dialect::kOpenAi);
}

TEST(OpenAiRequest, FullChat) {
  auto r = Chat(R"({
    "model": "x",
    "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
       "name": "ignored"},
      {"role": "assistant", "content": "ok"},
      {"role": "user", "content": ""}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
    "seed": 42, "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
    "user": "alice", "presence_penalty": 0.5, "frequency_penalty": -1, "n": 1,
    "tools": [], "logprobs": false, "response_format": {"type": "text"},
    "some_future_field": {"x": [1, 2]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GenerationRequest& g = r->generation;
  ASSERT_EQ(g.messages.size(), 4u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "a\nb");
  EXPECT_EQ(g.messages[3].content, "");
  EXPECT_EQ(g.max_tokens, 7);
  EXPECT_FLOAT_EQ(*g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*g.sampling.top_p, 0.9f);
  EXPECT_EQ(*g.sampling.top_k, 20);
  EXPECT_EQ(*g.sampling.seed, 42u);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(g.agent.id, "alice");
  EXPECT_TRUE(r->stream);
}

TEST(OpenAiRequest, MaxTokensSpellings) {
  EXPECT_EQ(Chat(testing::ChatBody("x", {{"max_tokens", 5}}))->generation.max_tokens, 5);
  EXPECT_EQ(Chat(testing::ChatBody("x", {{"max_tokens", 5}, {"max_completion_tokens", 5}}))
                ->generation.max_tokens,
            5);
  EXPECT_FALSE(
      Chat(testing::ChatBody("x", {{"max_tokens", 5}, {"max_completion_tokens", 6}})).ok());
}

TEST(OpenAiRequest, AgentFromHeader) {
  RequestContext ctx = Ctx();
  ctx.header_agent_id = "bob";
  auto r = ParseChatCompletionRequest(testing::ChatBody("x"), ctx);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->generation.agent.id, "bob");
  auto conflict = ParseChatCompletionRequest(testing::ChatBody("x", {{"user", "eve"}}), ctx);
  EXPECT_FALSE(conflict.ok());
}

// Every malformed body is a 400-class Status whose message names the field.
TEST(OpenAiRequest, RejectsMalformedChat) {
  struct Case {
    const char* body;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"messages": 5})", "'messages': expected an array, got integer"},
      {R"({"messages": []})", "'messages': must not be empty"},
      {R"({"model": "m"})", "'messages': required"},
      {R"({"messages": [5]})", "'messages[0]': expected an object"},
      {R"({"messages": [{"content": "x"}]})", "'messages[0].role': required"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "'messages[0].role': must be"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "'messages[0].tool_call_id': required"},
      {R"({"messages": [{"role": "user"}]})", "'messages[0].content': required"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "'messages[0].content': expected"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "'messages[0].content[0].type'"},
      {R"({"messages": [{"role": "assistant", "content": "x", "tool_calls": [{}]}]})",
       "'messages[0].tool_calls[0].id': required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "x"})",
       "'max_tokens': expected an integer, got string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})",
       "'max_tokens': must be at least 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
       "'max_tokens': must be at least 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000})",
       "exceeds the model's context length of 4096"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10.5})",
       "'max_tokens': expected an integer, got number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 17})", "'n': must be in [1, 16]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "'n'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 2, "user": "ada"})",
       "'n': n > 1 is only supported without an agent"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 2, "best_of": 3})", "'best_of'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "'top_logprobs': requires logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
           "top_logprobs": 21})",
       "'top_logprobs': must be in [0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "'logprobs'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": -2.5})",
       "'frequency_penalty'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})",
       "'temperature': must be in [0, 2]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "'top_p'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "'stream'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})",
       "only allowed when stream is true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})",
       "at most 4"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 7})", "'stop'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "user": 7})", "'user'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "user": "a\u0001b"})", "agent id"},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": 7})", "'model'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "'tools[0].function': required"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "xml"}})",
       "'response_format.type'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 3})",
       "'presence_penalty'"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xC3\x28\"}]}", "UTF-8"},
      {R"({"messages": [{"role": "user", "content": "x"}],)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto r = Chat(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    const ApiError e = ApiErrorFromStatus(r.status());
    EXPECT_EQ(HttpStatus(e.kind, Dialect::kOpenAi), 400) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.body << "\n  got: " << r.status().message();
  }
}

TEST(OpenAiRequest, Completions) {
  auto r = ParseCompletionRequest(R"({"model":"m","prompt":"Once","max_tokens":3})", Ctx());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->generation.prompt, "Once");
  EXPECT_TRUE(r->generation.messages.empty());
  EXPECT_TRUE(r->generation.request_id.starts_with("cmpl-"));
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt":["Once"]})", Ctx())->generation.prompt, "Once");
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":["a","b"]})", Ctx()).ok());
  auto tokens = ParseCompletionRequest(R"({"prompt":[[1,2,3]]})", Ctx());
  ASSERT_FALSE(tokens.ok());
  EXPECT_EQ(tokens.status().code(), ErrorCode::kUnsupported);
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":5})", Ctx()).ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"max_tokens":5})", Ctx()).ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","best_of":2})", Ctx()).ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","suffix":"y"})", Ctx()).ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","echo":1})", Ctx()).ok());
}

TEST(OpenAiRequest, SamplingSurface) {
  auto chat = Chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 3, "logprobs": true,
                       "top_logprobs": 5, "presence_penalty": 1.5, "frequency_penalty": -0.5,
                       "seed": 9})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->generation.n, 3);
  EXPECT_EQ(chat->generation.logprobs, 5);
  EXPECT_FALSE(chat->generation.prompt_logprobs);
  EXPECT_FLOAT_EQ(*chat->generation.sampling.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(*chat->generation.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(Chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})")
                ->generation.logprobs,
            -1);

  // Scoring as lm-eval-harness asks for it: echo, logprobs, max_tokens 0 or 1.
  auto score =
      ParseCompletionRequest(R"({"prompt":"x","echo":true,"logprobs":1,"max_tokens":0})", Ctx());
  ASSERT_TRUE(score.ok()) << score.status().ToString();
  EXPECT_TRUE(score->generation.prompt_logprobs);
  EXPECT_EQ(score->generation.logprobs, 1);
  EXPECT_EQ(*score->generation.max_tokens, 0);
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt":"x","echo":true,"max_tokens":0})", Ctx())
                  ->generation.prompt_logprobs);
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","echo":true,"max_tokens":1})", Ctx())
                   ->generation.prompt_logprobs);
  auto zero = ParseCompletionRequest(R"({"prompt":"x","max_tokens":0})", Ctx());
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("'max_tokens'"), std::string::npos);
  auto agent =
      ParseCompletionRequest(R"({"prompt":"x","echo":true,"logprobs":1,"user":"ada"})", Ctx());
  ASSERT_FALSE(agent.ok());
  EXPECT_NE(agent.status().message().find("'echo'"), std::string::npos);
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","logprobs":21})", Ctx()).ok());
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","logprobs":true})", Ctx()).ok());
}

TEST(OpenAiReply, ChatChoicesWithLogprobs) {
  auto reply = MakeChatCompletionReply(ResponseMeta{"c", 1, "m"}, false,
                                       {.n = 2, .logprobs = true, .echo = {}});
  const TokenLogprob hi{"Hi", -0.5f, {{"Hi", -0.5f}, {"Yo", -1.5f}}};
  GenerationResult result;
  result.choices = {{FinishReason::kLength, ""}, {FinishReason::kEndOfTurn, ""}};
  const Json j = Json::parse(
      reply->CompleteChoices({}, {ReplyChunk{0, "Hi", {hi}}, ReplyChunk{1, "Yo", {}}}, result));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  const Json& c = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(c["token"], "Hi");
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["bytes"], Json::array({72, 105}));
  EXPECT_EQ(c["top_logprobs"][1]["token"], "Yo");
  EXPECT_TRUE(j["choices"][1]["logprobs"]["content"].empty());

  const auto events = ParseSse(reply->StreamStart({}) + reply->StreamChunk({1, "Yo", {}}) +
                               reply->StreamChunk({0, "", {hi}}) + reply->StreamEnd(result));
  // Two role chunks, two deltas, two finish chunks, [DONE].
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(Json::parse(events[2].data)["choices"][0]["index"], 1);
  EXPECT_EQ(Json::parse(events[3].data)["choices"][0]["logprobs"]["content"][0]["token"], "Hi");
  EXPECT_EQ(Json::parse(events[5].data)["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiReply, CompletionEchoWithLogprobs) {
  auto reply = MakeCompletionReply(ResponseMeta{"c", 1, "m"}, false,
                                   {.n = 1, .logprobs = true, .echo = "Once"});
  PromptInfo prompt;
  prompt.logprobs = {TokenLogprob{"On", std::nullopt, {}},
                     TokenLogprob{"ce", -2.0f, {{"ce", -2.0f}}}};
  const TokenLogprob upon{" upon", -0.25f, {{" upon", -0.25f}}};
  const Json j = Json::parse(
      reply->CompleteChoices(prompt, {ReplyChunk{0, " upon", {upon}}}, GenerationResult{}));
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(j["choices"][0]["text"], "Once upon");
  EXPECT_EQ(lp["tokens"], Json::array({"On", "ce", " upon"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -2.0f);
  EXPECT_EQ(lp["text_offset"], Json::array({0, 2, 4}));
  EXPECT_FLOAT_EQ(lp["top_logprobs"][2][" upon"].get<float>(), -0.25f);
}

GenerationResult Finished(FinishReason reason) {
  GenerationResult r;
  r.finish_reason = reason;
  r.usage = Usage{.prompt_tokens = 10, .cached_tokens = 4, .completion_tokens = 3};
  return r;
}

TEST(OpenAiReply, ChatCompletionObject) {
  auto reply = MakeChatCompletionReply(ResponseMeta{"chatcmpl-1", 1700000000, "fake-model"}, false);
  const Json j = Json::parse(reply->Complete("Hello", Finished(FinishReason::kEndOfTurn)));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "fake-model");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"], Json({{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"], Json::parse(R"({"prompt_tokens":10,"completion_tokens":3,
      "total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}})"));
  EXPECT_EQ(Json::parse(reply->Complete(
                "", Finished(FinishReason::kLength)))["choices"][0]["finish_reason"],
            "length");
  EXPECT_EQ(Json::parse(reply->Complete(
                "", Finished(FinishReason::kStopSequence)))["choices"][0]["finish_reason"],
            "stop");
}

TEST(OpenAiReply, ChatStreamWithUsage) {
  auto reply = MakeChatCompletionReply(ResponseMeta{"chatcmpl-1", 1700000000, "fake-model"}, true);
  const std::string sse = reply->StreamStart(PromptInfo{}) + reply->StreamText("Hel") +
                          reply->StreamText("") + reply->StreamText("lo") +
                          reply->StreamEnd(Finished(FinishReason::kLength));
  const auto events = ParseSse(sse);
  ASSERT_EQ(events.size(), 6u);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].event, "");
    const Json c = Json::parse(events[i].data);
    EXPECT_EQ(c["id"], "chatcmpl-1");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["model"], "fake-model");
    EXPECT_EQ(c["created"], 1700000000);
    ASSERT_TRUE(c.contains("usage"));
    if (i < 4) {
      EXPECT_TRUE(c["usage"].is_null());
      ASSERT_EQ(c["choices"].size(), 1u);
    }
  }
  EXPECT_EQ(Json::parse(events[0].data)["choices"][0]["delta"],
            Json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(Json::parse(events[1].data)["choices"][0]["delta"], Json({{"content", "Hel"}}));
  EXPECT_TRUE(Json::parse(events[1].data)["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(Json::parse(events[2].data)["choices"][0]["delta"], Json({{"content", "lo"}}));
  const Json last = Json::parse(events[3].data)["choices"][0];
  EXPECT_EQ(last["delta"], Json::object());
  EXPECT_EQ(last["finish_reason"], "length");
  const Json usage = Json::parse(events[4].data);
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 13);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(events[5].data, "[DONE]");
  // Without include_usage the chunks carry no usage key and no usage chunk comes.
  auto plain = MakeChatCompletionReply(ResponseMeta{"c", 1, "m"}, false);
  const auto plain_events =
      ParseSse(plain->StreamStart({}) + plain->StreamEnd(Finished(FinishReason::kEndOfTurn)));
  ASSERT_EQ(plain_events.size(), 3u);
  EXPECT_FALSE(Json::parse(plain_events[0].data).contains("usage"));
  EXPECT_EQ(plain_events[2].data, "[DONE]");
}

TEST(OpenAiReply, StreamErrorIsADataEventWithAnErrorObject) {
  auto reply = MakeChatCompletionReply(ResponseMeta{"c", 1, "m"}, false);
  const auto events = ParseSse(reply->StreamError({ApiErrorKind::kInternal, "boom"}));
  ASSERT_EQ(events.size(), 1u);
  const Json e = Json::parse(events[0].data);
  EXPECT_EQ(e["error"]["message"], "boom");
  EXPECT_EQ(e["error"]["type"], "server_error");
}

TEST(OpenAiReply, TextCompletionWithEcho) {
  auto reply = MakeCompletionReply(ResponseMeta{"cmpl-1", 5, "m"}, false,
                                   {.n = 1, .logprobs = false, .echo = "Once"});
  const Json j = Json::parse(reply->Complete(" upon", Finished(FinishReason::kLength)));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Once upon");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);

  const auto events = ParseSse(reply->StreamStart({}) + reply->StreamText(" upon") +
                               reply->StreamEnd(Finished(FinishReason::kEndOfTurn)));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(Json::parse(events[0].data)["choices"][0]["text"], "Once");
  EXPECT_EQ(Json::parse(events[1].data)["choices"][0]["text"], " upon");
  EXPECT_EQ(Json::parse(events[1].data)["object"], "text_completion");
  EXPECT_EQ(Json::parse(events[2].data)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[3].data, "[DONE]");
  auto no_echo = MakeCompletionReply(ResponseMeta{"cmpl-1", 5, "m"}, false);
  EXPECT_EQ(no_echo->StreamStart({}), "");
}

TEST(OpenAiReply, Models) {
  const ModelInfo m{.name = "fake-model", .context_length = 4096, .created_unix = 7};
  const Json list = Json::parse(OpenAiModelList(m));
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(
      list["data"][0],
      Json({{"id", "fake-model"}, {"object", "model"}, {"created", 7}, {"owned_by", "kvmem"}}));
}

}  // namespace
}  // namespace kvmem::serve
