// The HTTP server end to end: a real HttpServer on an ephemeral port, a FakeBackend, and
// httplib clients. Formats, status codes, auth, error bodies per dialect.
#include "serve/http_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "serve/agents_api.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

TEST(HttpServer, ChatCompletion) {
  ServerFixture f;
  auto res = f.Post("/v1/chat/completions", ChatBody("hello there", {{"user", "alice"}}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const Json j = ParseJson(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Echo: hello there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens"], std::string("user: hello there\n").size());
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(f.backend().last_request().agent.id, "alice");
  EXPECT_EQ(f.backend().last_request().agent.tenant, kDefaultTenant);

  // The agent's second turn reuses its cache: the fake's prefix match counts the bytes.
  auto again = f.Post("/v1/chat/completions", ChatBody("hello there", {{"user", "alice"}}));
  ASSERT_TRUE(again);
  EXPECT_EQ(ParseJson(again->body)["usage"]["prompt_tokens_details"]["cached_tokens"],
            std::string("user: hello there\n").size());
}

TEST(HttpServer, ChatCompletionStream) {
  ServerFixture f;
  auto res =
      f.Post("/v1/chat/completions",
             ChatBody("a b", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}),
             {{"X-Agent-Id", "bob"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
  const auto events = ParseSse(res->body);
  // A role chunk, content chunks (pieces that arrive together share one), a finish chunk, a
  // usage chunk, [DONE].
  ASSERT_GE(events.size(), 5u) << res->body;
  EXPECT_EQ(StreamText(events), "Echo: a b");
  EXPECT_EQ(ParseJson(events[0].data)["choices"][0]["delta"]["role"], "assistant");
  const size_t n = events.size();
  for (size_t i = 0; i + 1 < n; ++i) {
    const Json c = ParseJson(events[i].data);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], ParseJson(events[0].data)["id"]);  // one id for the whole stream
    if (i + 3 < n) {
      EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null()) << i;
    }
  }
  EXPECT_EQ(ParseJson(events[n - 3].data)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ParseJson(events[n - 2].data)["choices"], Json::array());
  EXPECT_EQ(ParseJson(events[n - 2].data)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(events[n - 1].data, "[DONE]");
  EXPECT_EQ(f.backend().last_request().agent.id, "bob");
}

TEST(HttpServer, MaxTokensAndStopSequences) {
  ServerFixture f;
  auto res = f.Post("/v1/chat/completions", ChatBody("one two three four", {{"max_tokens", 2}}));
  ASSERT_TRUE(res);
  const Json j = ParseJson(res->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Echo: one");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(f.backend().last_request().max_tokens, 2);

  auto stop = f.Post("/v1/messages", MessagesBody("one two three", {{"stop_sequences", {"thr"}}}));
  ASSERT_TRUE(stop);
  const Json m = ParseJson(stop->body);
  EXPECT_EQ(m["content"][0]["text"], "Echo: one two ");
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "thr");
}

TEST(HttpServer, Completions) {
  ServerFixture f;
  auto res = f.Post("/v1/completions", R"({"model":"m","prompt":"Once upon","echo":true})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const Json j = ParseJson(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "Once uponEcho: Once upon");
  EXPECT_EQ(f.backend().last_request().prompt, "Once upon");

  auto stream = f.Post("/v1/completions", R"({"prompt":"hi","stream":true})");
  ASSERT_TRUE(stream);
  const auto events = ParseSse(stream->body);
  ASSERT_GE(events.size(), 3u) << stream->body;  // text chunks, finish, [DONE]
  EXPECT_EQ(StreamText(events), "Echo: hi");
  EXPECT_EQ(ParseJson(events[0].data)["object"], "text_completion");
  EXPECT_EQ(ParseJson(events[events.size() - 2].data)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events.back().data, "[DONE]");
}

TEST(HttpServer, AnthropicMessages) {
  ServerFixture f;
  auto res = f.Post("/v1/messages",
                    MessagesBody("hi", {{"system", "be nice"}, {"metadata", {{"user_id", "c3"}}}}),
                    {{"anthropic-version", "2023-06-01"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const Json j = ParseJson(res->body);
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("msg_"));
  EXPECT_EQ(j["content"], Json::parse(R"([{"type":"text","text":"Echo: hi"}])"));
  EXPECT_EQ(j["stop_reason"], "end_turn");
  EXPECT_EQ(j["usage"]["output_tokens"], 2);
  const GenerationRequest g = f.backend().last_request();
  EXPECT_EQ(g.agent.id, "c3");
  ASSERT_EQ(g.messages.size(), 2u);
  EXPECT_EQ(g.messages[0].role, "system");

  auto stream = f.Post("/v1/messages", MessagesBody("hi", {{"stream", true}}));
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  const auto events = ParseSse(stream->body);
  std::vector<std::string> names;
  for (const SseEvent& e : events) {
    EXPECT_EQ(ParseJson(e.data)["type"], e.event);
    if (names.empty() || names.back() != e.event) names.push_back(e.event);
  }
  // The deltas may come as one event or several; the order of kinds is fixed.
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  EXPECT_EQ(StreamText(events), "Echo: hi");
  const Json start = ParseJson(events[0].data);
  EXPECT_EQ(start["message"]["usage"]["input_tokens"], std::string("user: hi\n").size());
  const Json delta = ParseJson(events[events.size() - 2].data);
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 2);
}

TEST(HttpServer, StreamReassemblesSplitUtf8) {
  ServerFixture f;
  auto res = f.Post("/v1/chat/completions", ChatBody("[utf8-split]", {{"stream", true}}));
  ASSERT_TRUE(res);
  const std::string text = StreamText(ParseSse(res->body));
  EXPECT_EQ(text, "\xC3\xA9\xEF\xBF\xBD");  // é, then U+FFFD for the lone 0xFF

  auto whole = f.Post("/v1/chat/completions", ChatBody("[utf8-split]"));
  ASSERT_TRUE(whole);
  EXPECT_EQ(ParseJson(whole->body)["choices"][0]["message"]["content"], "\xC3\xA9\xEF\xBF\xBD");
}

TEST(HttpServer, StreamWithoutOnPromptStillStarts) {
  ServerFixture f;
  auto res = f.Post("/v1/messages", MessagesBody("x [no-prompt-call]", {{"stream", true}}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const auto events = ParseSse(res->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "message_stop");
  // The late usage arrives in message_delta.
  EXPECT_GT(ParseJson(events[events.size() - 2].data)["usage"]["input_tokens"].get<int>(), 0);
}

TEST(HttpServer, Models) {
  ServerFixture f;
  auto res = f.Get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(ParseJson(res->body)["data"][0]["id"], "fake-model");
  auto anthropic = f.Get("/v1/models", {{"anthropic-version", "2023-06-01"}});
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(ParseJson(anthropic->body)["data"][0]["type"], "model");
  auto one = f.Get("/v1/models/fake-model");
  ASSERT_TRUE(one);
  EXPECT_EQ(ParseJson(one->body)["object"], "model");
  auto missing = f.Get("/v1/models/gpt-5");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpServer, AgentsListGetDelete) {
  ServerFixture f;
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("x", {{"user", "zed"}}))->status, 200);
  ASSERT_EQ(f.Post("/v1/messages", MessagesBody("y"), {{"X-Agent-Id", "amy"}})->status, 200);
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("anonymous"))->status, 200);

  auto list = f.Get("/v1/agents");
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200);
  const Json l = ParseJson(list->body);
  EXPECT_EQ(l["object"], "list");
  ASSERT_EQ(l["data"].size(), 2u);
  EXPECT_EQ(l["data"][0]["id"], "amy");  // sorted
  EXPECT_EQ(l["data"][1]["id"], "zed");

  auto one = f.Get("/v1/agents/zed");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  const Json a = ParseJson(one->body);
  EXPECT_EQ(a["object"], "agent");
  EXPECT_EQ(a["tier"], "hot");
  EXPECT_EQ(a["kv_format"], "f16");
  EXPECT_EQ(a["memory"], Json::parse(R"({"policy":"full","config":{}})"));
  EXPECT_GT(a["last_turn"]["prefill_tokens"].get<int>(), 0);  // the backend's report
  EXPECT_GT(a["cached_tokens"].get<int>(), 0);
  EXPECT_GT(a["bytes"].get<int>(), 0);
  EXPECT_EQ(a["last_used_at"], 1700000000);

  // Rebuild: the backend's answer (the fake's policy has nothing to rebuild: null); only POST.
  auto rebuilt = f.Post("/v1/agents/zed/rebuild", "");
  ASSERT_TRUE(rebuilt);
  EXPECT_EQ(rebuilt->status, 200);
  EXPECT_EQ(ParseJson(rebuilt->body),
            Json::parse(R"({"id":"zed","object":"agent.rebuild","rebuild":null})"));
  EXPECT_EQ(f.Post("/v1/agents/nobody/rebuild", "")->status, 404);
  EXPECT_EQ(f.Get("/v1/agents/zed/rebuild")->status, 405);

  auto del = f.Delete("/v1/agents/zed");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(ParseJson(del->body),
            Json::parse(R"({"id":"zed","object":"agent.deleted","deleted":true})"));
  auto gone = f.Get("/v1/agents/zed");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(ParseJson(gone->body)["error"]["message"], "no agent 'zed'");
  EXPECT_EQ(f.Delete("/v1/agents/zed")->status, 404);
  auto bad = f.Get("/v1/agents/bad%01id");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

TEST(HttpServer, AgentsCreateWithAMemoryPolicy) {
  ServerFixture f;
  auto made = f.Post("/v1/agents", R"({"id":"rae","memory":{"policy":"memart",
      "config":{"top_k":8,"block_size":32,"strategy":"rr-max","keep_last":64,"neighbors":1,
                "heads":["1.0","0.2"]}}})");
  ASSERT_TRUE(made);
  EXPECT_EQ(made->status, 200) << made->body;
  const Json m = ParseJson(made->body)["memory"];
  EXPECT_EQ(m["policy"], "memart");
  EXPECT_EQ(m["config"]["top_k"], 8);
  EXPECT_EQ(m["config"]["keep_first"], 0);  // defaults filled in by the policy's parser
  EXPECT_EQ(m["config"]["heads"], Json::parse(R"(["1.0","0.2"])"));
  const std::optional<AgentCreateRequest> r = f.backend().last_create();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, "rae");
  EXPECT_EQ(r->policy, "memart");
  EXPECT_EQ(r->config["block_size"], 32);
  EXPECT_EQ(ParseJson(f.Get("/v1/agents/rae")->body)["memory"], m);
  // A turn keeps the policy; creating it again conflicts.
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("x", {{"user", "rae"}}))->status, 200);
  EXPECT_EQ(ParseJson(f.Get("/v1/agents/rae")->body)["memory"], m);
  EXPECT_EQ(f.Post("/v1/agents", R"({"id":"rae"})")->status, 409);
  // The default is the server's (full here); the shape before policies still works.
  ASSERT_EQ(f.Post("/v1/agents", R"({"id":"fay"})")->status, 200);
  EXPECT_EQ(f.backend().last_create()->policy, "");
  EXPECT_EQ(ParseJson(f.Get("/v1/agents/fay")->body)["memory"]["policy"], "full");
  auto old = f.Post("/v1/agents", R"({"id":"ola","memory":"retrieval",
      "retrieval":{"top_k":4,"heads":["7.1"]}})");
  ASSERT_EQ(old->status, 200) << old->body;
  EXPECT_EQ(ParseJson(old->body)["memory"]["policy"], "memart");
  EXPECT_EQ(ParseJson(old->body)["memory"]["config"]["top_k"], 4);

  // The conversation's settings.
  auto srv = f.Post("/v1/agents", R"({"id":"sid","conversation":"server","max_checkpoints":0})");
  ASSERT_EQ(srv->status, 200) << srv->body;
  EXPECT_TRUE(f.backend().last_create()->server_conversation);
  EXPECT_EQ(f.backend().last_create()->max_checkpoints, 0);
  ASSERT_EQ(f.Post("/v1/agents", R"({"id":"cid"})")->status, 200);
  EXPECT_FALSE(f.backend().last_create()->server_conversation);
  EXPECT_FALSE(f.backend().last_create()->max_checkpoints.has_value());

  const std::pair<const char*, const char*> bad[] = {
      {R"({"id":"x","conversation":"both"})", "'conversation'"},
      {R"({"id":"x","conversation":1})", "'conversation'"},
      {R"({"id":"x","max_checkpoints":-1})", "'max_checkpoints'"},
      {R"({"id":"x","max_checkpoints":65})", "'max_checkpoints'"},
      {R"({"memory":"retrieval"})", "'id': required"},
      {R"({"id":"a\u0001b"})", "id"},
      {R"({"id":"x","memory":"episodic"})",
       "unknown memory policy 'episodic' (policies: none, full, memart, h2o, epicache, intentkv, "
       "keep)"},
      {R"({"id":"x","memory":{"policy":"nope"}})",
       "policies: none, full, memart, h2o, epicache, intentkv, keep"},
      {R"({"id":"x","memory":{"config":{}}})", "'memory.policy'"},
      {R"({"id":"x","memory":{"policy":"h2o","budget":4}})", "'memory.budget'"},
      {R"({"id":"x","memory":{"policy":"h2o","config":[]}})", "'memory.config'"},
      {R"({"id":"x","memory":{"policy":"h2o","config":{"budget":0}}})",
       "'budget' must be an integer in [1, 1048576]"},
      {R"({"id":"x","memory":{"policy":"full","config":{"top_k":4}}})", "unknown field 'top_k'"},
      {R"({"id":"x","memory":{"policy":"memart"},"retrieval":{}})", "'retrieval'"},
      {R"({"id":"x","memory":"full","retrieval":{"top_k":4}})", "'retrieval'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"topk":4}})", "unknown field 'topk'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"top_k":0}})", "'top_k'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"top_k":"8"}})", "'top_k'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"neighbors":99}})", "'neighbors'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"whole_turns":true}})",
       "unknown field 'whole_turns'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"heads":"7.1"}})", "'heads'"},
      {R"({"id":"x","memory":"retrieval","retrieval":{"heads":[7.1]}})", "'heads'"},
      {R"({"id":"x","memory":"retrieval","retrieval":[]})", "'retrieval'"},
      {R"([1])", ""},
  };
  for (const auto& [body, names] : bad) {
    auto res = f.Post("/v1/agents", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    EXPECT_NE(ParseJson(res->body)["error"]["message"].get<std::string>().find(names),
              std::string::npos)
        << body << " -> " << res->body;
  }
}

// GET /v1/policies: every row of the policy table with its config's defaults and bounds.
TEST(HttpServer, PoliciesListEveryPolicyWithItsConfig) {
  ServerFixture f;
  auto res = f.Get("/v1/policies");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const Json j = ParseJson(res->body);
  EXPECT_EQ(j["object"], "list");
  std::vector<std::string> names;
  for (const Json& p : j["data"]) names.push_back(p["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"none", "full", "memart", "h2o", "epicache",
                                             "intentkv", "keep"}));
  const Json& memart = j["data"][2];
  EXPECT_EQ(memart["aliases"], Json::parse(R"(["retrieval"])"));
  EXPECT_EQ(memart["config"]["top_k"]["default"], 32);
  EXPECT_EQ(memart["config"]["top_k"]["min"], 1);
  EXPECT_EQ(memart["config"]["top_k"]["max"], 4096);
  EXPECT_EQ(memart["config"]["block_size"]["type"], "integer");
  EXPECT_EQ(j["data"][3]["config"]["recent_ratio"]["default"], 0.5);
  EXPECT_FALSE(j["data"][1]["description"].get<std::string>().empty());
  EXPECT_EQ(f.Post("/v1/policies", "{}")->status, 405);
}

// kvmem's retrieval_query extension reaches the backend from either dialect; it must be a
// non-empty string.
TEST(HttpServer, RetrievalQueryIsPassedOnFromBothDialects) {
  ServerFixture f;
  const Json q = {{"retrieval_query", "where is it?"}};
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("so, where is it?", q))->status, 200);
  EXPECT_EQ(f.backend().last_request().retrieval_query, "where is it?");
  ASSERT_EQ(f.Post("/v1/messages", MessagesBody("so, where is it?", q))->status, 200);
  EXPECT_EQ(f.backend().last_request().retrieval_query, "where is it?");
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("so, where is it?"))->status, 200);
  EXPECT_FALSE(f.backend().last_request().retrieval_query);
  for (const Json& bad : {Json{{"retrieval_query", ""}}, Json{{"retrieval_query", 3}}}) {
    for (const auto& [path, body] : {std::pair{"/v1/chat/completions", ChatBody("x", bad)},
                                     std::pair{"/v1/messages", MessagesBody("x", bad)}}) {
      const auto res = f.Post(path, body);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 400) << body;
      EXPECT_NE(res->body.find("retrieval_query"), std::string::npos) << res->body;
    }
  }
}

TEST(HttpServer, AgentJsonShowsThePolicysReportOfTheLastTurn) {
  AgentInfo a;
  a.id = "rae";
  a.policy = "memart";
  a.last_turn = Json::parse(R"({"retrieved_rows":16,"blocks":[{"block":1,"text":"the door"}]})");
  const Json j = ParseJson(AgentJson(a));
  EXPECT_EQ(j["last_turn"], a.last_turn);
  EXPECT_EQ(j["memory"]["policy"], "memart");
  a.last_turn = nullptr;
  EXPECT_TRUE(ParseJson(AgentJson(a))["last_turn"].is_null());
}

TEST(HttpServer, AuthAndTenants) {
  HttpServerOptions o;
  o.api_keys = {{"key-a", "tenant-a"}, {"key-b", "tenant-b"}};
  ServerFixture f(o);

  auto none = f.Post("/v1/chat/completions", ChatBody("x"));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(ParseJson(none->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(f.backend().calls(), 0);

  auto wrong = f.Post("/v1/messages", MessagesBody("x"), {{"x-api-key", "key-c"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(ParseJson(wrong->body),
            Json::parse(R"({"type":"error","error":{"type":"authentication_error",
                            "message":"invalid API key"}})"));
  EXPECT_EQ(
      f.Post("/v1/chat/completions", ChatBody("x"), {{"Authorization", "Bearer key-"}})->status,
      401);
  EXPECT_EQ(
      f.Post("/v1/chat/completions", ChatBody("x"), {{"Authorization", "Basic key-a"}})->status,
      401);

  auto a = f.Post("/v1/chat/completions", ChatBody("x", {{"user", "same"}}),
                  {{"Authorization", "Bearer key-a"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(f.backend().last_request().agent.tenant, "tenant-a");
  auto b = f.Post("/v1/messages", MessagesBody("x", {{"metadata", {{"user_id", "other"}}}}),
                  {{"x-api-key", "key-b"}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(f.backend().last_request().agent.tenant, "tenant-b");

  // Tenants see only their own agents, even under the same id.
  EXPECT_EQ(f.Get("/v1/agents/same", {{"x-api-key", "key-a"}})->status, 200);
  EXPECT_EQ(f.Get("/v1/agents/same", {{"x-api-key", "key-b"}})->status, 404);
  EXPECT_EQ(ParseJson(f.Get("/v1/agents", {{"x-api-key", "key-b"}})->body)["data"].size(), 1u);
  EXPECT_EQ(f.Delete("/v1/agents/same", {{"x-api-key", "key-b"}})->status, 404);

  EXPECT_EQ(f.Get("/health")->status, 200);  // open
  EXPECT_EQ(f.Get("/metrics")->status, 401);
  EXPECT_EQ(f.Get("/metrics", {{"Authorization", "bearer key-b"}})->status, 200);
  EXPECT_EQ(f.Get("/v1/models")->status, 401);
  EXPECT_EQ(f.Get("/v1/agents")->status, 401);
}

TEST(HttpServer, ClientErrorsAre400InTheRoutesDialect) {
  ServerFixture f;
  const char* chat_bodies[] = {
      "not json",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"bad \xFF utf8\"}]}",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "x"})",
      R"({"messages": 5})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999999})",
      R"({"messages": [{"role": "user", "content": "x"}], "n": 99})",
      R"({"messages": [{"role": "robot", "content": "x"}]})",
      R"({"messages": []})",
      R"([1, 2])",
      "",
  };
  for (const char* body : chat_bodies) {
    auto res = f.Post("/v1/chat/completions", body);
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body;
    const Json j = ParseJson(res->body);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << body;
  }
  auto conflict =
      f.Post("/v1/chat/completions", ChatBody("x", {{"user", "a"}}), {{"X-Agent-Id", "b"}});
  EXPECT_EQ(conflict->status, 400);

  for (const std::string& body :
       {std::string(R"({"messages": [{"role": "user", "content": "x"}]})"),
        MessagesBody("x", {{"max_tokens", 0}}), MessagesBody("x", {{"temperature", 2}})}) {
    auto res = f.Post("/v1/messages", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
    const Json j = ParseJson(res->body);
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  EXPECT_EQ(f.backend().calls(), 0);
}

TEST(HttpServer, BackendErrorsMapToStatuses) {
  ServerFixture f;
  struct Case {
    const char* marker;
    int openai, anthropic;
  };
  const Case cases[] = {{"[error:not_found]", 404, 404},    {"[error:resource]", 503, 529},
                        {"[error:unavailable]", 503, 529},  {"[error:internal]", 500, 500},
                        {"[error:out_of_range]", 400, 400}, {"[error:invalid]", 400, 400},
                        {"[error:precondition]", 409, 409}};
  for (const Case& c : cases) {
    for (bool stream : {false, true}) {
      auto o = f.Post("/v1/chat/completions", ChatBody(c.marker, {{"stream", stream}}));
      ASSERT_TRUE(o);
      EXPECT_EQ(o->status, c.openai) << c.marker << " stream=" << stream;
      EXPECT_EQ(o->get_header_value("Content-Type"), "application/json");
      auto a = f.Post("/v1/messages", MessagesBody(c.marker, {{"stream", stream}}));
      ASSERT_TRUE(a);
      EXPECT_EQ(a->status, c.anthropic) << c.marker << " stream=" << stream;
      EXPECT_EQ(ParseJson(a->body)["type"], "error");
      if (c.openai == 503) {
        EXPECT_EQ(o->get_header_value("Retry-After"), "1");
        EXPECT_EQ(ParseJson(a->body)["error"]["type"], "overloaded_error");
      }
      if (c.openai == 500) {
        // The detail (a path) stays in the server log.
        EXPECT_EQ(o->body.find("secret"), std::string::npos) << o->body;
        EXPECT_EQ(ParseJson(a->body)["error"]["type"], "api_error");
      }
    }
  }
}

TEST(HttpServer, ErrorAfterStreamStartIsAnInStreamEvent) {
  ServerFixture f;
  auto o = f.Post("/v1/chat/completions", ChatBody("a [error-midway]", {{"stream", true}}));
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, 200);
  auto events = ParseSse(o->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(ParseJson(events.back().data)["error"]["type"], "server_error");
  for (const SseEvent& e : events) EXPECT_NE(e.data, "[DONE]");

  auto a = f.Post("/v1/messages", MessagesBody("a [error-midway]", {{"stream", true}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  events = ParseSse(a->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back().event, "error");
  EXPECT_EQ(ParseJson(events.back().data)["error"]["type"], "api_error");
}

TEST(HttpServer, BodyTooLargeIs413) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  ServerFixture f(o);
  const std::string big = ChatBody(std::string(2000, 'x'));
  auto res = f.Post("/v1/chat/completions", big);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(ParseJson(res->body)["error"]["code"], "request_too_large");
  auto a = f.Post("/v1/messages", MessagesBody(std::string(2000, 'x')));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 413);
  EXPECT_EQ(ParseJson(a->body)["error"]["type"], "request_too_large");
  EXPECT_EQ(f.Post("/v1/chat/completions", ChatBody("small"))->status, 200);
  EXPECT_EQ(f.backend().calls(), 1);
}

// The limit holds however the body arrives: chunked (no Content-Length) or gzip-compressed
// (a small Content-Length that inflates past the limit).
TEST(HttpServer, BodyLimitCoversChunkedAndCompressedBodies) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  ServerFixture f(o);
  const std::string big = ChatBody(std::string(100000, 'x'));
  auto chunked = f.Client()->Post(
      "/v1/chat/completions",
      [&](size_t offset, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(500, big.size() - offset);
        sink.write(big.data() + offset, n);
        if (offset + n == big.size()) sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);

  auto cli = f.Client();
  cli->set_compress(true);
  auto gzip = cli->Post("/v1/messages", MessagesBody(std::string(100000, 'x')), "application/json");
  ASSERT_TRUE(gzip);
  EXPECT_EQ(gzip->status, 413);
  EXPECT_EQ(ParseJson(gzip->body)["error"]["type"], "request_too_large");
  // A compressed body within the limit is accepted.
  auto small = f.Client();
  small->set_compress(true);
  auto ok = small->Post("/v1/chat/completions", ChatBody("zip"), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ParseJson(ok->body)["choices"][0]["message"]["content"], "Echo: zip");
  EXPECT_EQ(f.backend().calls(), 1);
}

TEST(HttpServer, UnknownRoutesAndMethods) {
  ServerFixture f;
  auto res = f.Get("/v1/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(ParseJson(res->body)["error"]["message"], "no route for GET /v1/nothing");
  auto get_chat = f.Get("/v1/chat/completions");
  ASSERT_TRUE(get_chat);
  EXPECT_EQ(get_chat->status, 405);
  EXPECT_EQ(get_chat->get_header_value("Allow"), "POST");
  auto get_messages = f.Get("/v1/messages");
  ASSERT_TRUE(get_messages);
  EXPECT_EQ(get_messages->status, 405);
  EXPECT_EQ(ParseJson(get_messages->body)["type"], "error");
  EXPECT_EQ(f.Delete("/v1/agents")->status, 405);
  EXPECT_EQ(f.Post("/v1/agents/x", "{}")->status, 405);
  EXPECT_EQ(f.Client()->Put("/v1/models", "{}", "application/json")->status, 405);
  auto post_unknown = f.Post("/v1/unknown", "{}");
  ASSERT_TRUE(post_unknown);
  EXPECT_EQ(post_unknown->status, 404);
  EXPECT_EQ(ParseJson(post_unknown->body)["error"]["message"], "no route for POST /v1/unknown");
  auto messages_typo = f.Post("/v1/messages/batches", "{}");
  ASSERT_TRUE(messages_typo);
  EXPECT_EQ(messages_typo->status, 404);
  EXPECT_EQ(ParseJson(messages_typo->body)["error"]["type"], "not_found_error");
  // A very long path neither crashes the router nor matches a route.
  EXPECT_EQ(f.Get("/v1/agents/" + std::string(7000, 'a'))->status, 400);
}

TEST(HttpServer, HealthAndMetrics) {
  ServerFixture f;
  auto health = f.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(ParseJson(health->body)["status"], "ok");
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("x y", {{"user", "m1"}}))->status, 200);
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("x y", {{"user", "m1"}}))->status, 200);
  ASSERT_EQ(f.Post("/v1/chat/completions", "bad")->status, 400);
  f.Get("/v1/agents/m1");
  auto metrics = f.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& m = metrics->body;
  auto has = [&](const std::string& line) {
    EXPECT_NE(m.find(line + "\n"), std::string::npos) << line << "\n" << m;
  };
  has("kvmem_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2");
  has("kvmem_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1");
  has("kvmem_http_requests_total{endpoint=\"/v1/agents/{id}\",status=\"200\"} 1");
  has("kvmem_http_requests_total{endpoint=\"/health\",status=\"200\"} 1");
  has("kvmem_agent_cache_lookups_total{tier=\"miss\"} 1");
  has("kvmem_agent_cache_lookups_total{tier=\"hot\"} 1");
  has("kvmem_generation_tokens_total 6");
  has("kvmem_time_to_first_token_seconds_count 2");
  has("kvmem_store_bytes 12345");
  has("kvmem_requests_in_flight 0");
}

}  // namespace
}  // namespace kvmem::serve::testing
