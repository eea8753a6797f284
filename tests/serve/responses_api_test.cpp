// The Responses API (serve/responses_api.h): request parsing without HTTP, then the routes over
// a FakeBackend: the response object, the stream's events, chains by previous_response_id,
// stored records (GET, DELETE, 404), tenants and store: false.
#include "serve/responses_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve_test_util.h"

namespace kvmem::serve {
namespace {

using testing::Ctx;
using testing::FakeBackend;
using testing::ParseJson;
using testing::ParseSse;
using testing::ServerFixture;

Result<ParsedRequest> Parse(const std::string& body, FakeBackend& backend) {
  return ParseResponsesRequest(body, Ctx(), backend);
}

// "role: content" of each message.
std::vector<std::string> Lines(const std::vector<ChatMessage>& messages) {
  std::vector<std::string> out;
  for (const ChatMessage& m : messages) out.push_back(m.role + ": " + m.content);
  return out;
}

TEST(ResponsesRequest, StringInput) {
  FakeBackend backend;
  auto r = Parse(R"({"model":"x","input":"hi","instructions":"be brief","max_output_tokens":9,
                     "temperature":0.5,"top_p":0.9,"user":"ignored","prompt_cache_key":"k",
                     "some_future_field":1})",
                 backend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GenerationRequest& g = r->generation;
  EXPECT_EQ(Lines(g.messages), (std::vector<std::string>{"system: be brief", "user: hi"}));
  EXPECT_EQ(g.max_tokens, 9);
  EXPECT_FLOAT_EQ(*g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(*g.sampling.top_p, 0.9f);
  EXPECT_TRUE(g.request_id.starts_with("resp_"));
  // A new chain: its agent is named by the response's own id, never by `user`.
  EXPECT_EQ(g.agent.tenant, "t1");
  EXPECT_EQ(g.agent.id, g.request_id);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->prompt_field, "input");
}

TEST(ResponsesRequest, ItemList) {
  FakeBackend backend;
  auto r = Parse(R"({"input":[
      {"role":"developer","content":"rules"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},
                                                 {"type":"input_text","text":"b"}]},
      {"role":"assistant","content":[{"type":"output_text","text":"ok"}]},
      {"role":"user","content":"next"}],
    "stream":true,"store":false})",
                 backend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(
      Lines(r->generation.messages),
      (std::vector<std::string>{"system: rules", "user: a\nb", "assistant: ok", "user: next"}));
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->generation.agent.id, "");  // store: false runs anonymous
}

TEST(ResponsesRequest, BadBodiesNameTheField) {
  FakeBackend backend;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "'input'"},
      {R"({"input":[]})", "'input'"},
      {R"({"input":5})", "'input'"},
      {R"({"input":[{"role":"robot","content":"x"}]})", "'input[0].role'"},
      {R"({"input":[{"role":"user"}]})", "'input[0].content'"},
      {R"({"input":[{"type":"item_reference","id":"x"}]})", "'input[0].type'"},
      {R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})",
       "'input[0].content[0].type'"},
      {R"({"input":"x","max_output_tokens":0})", "'max_output_tokens'"},
      {R"({"input":"x","temperature":3})", "'temperature'"},
      {R"({"input":"x","store":"yes"})", "'store'"},
      {R"({"input":"x","instructions":7})", "'instructions'"},
      {R"({"input":"x","metadata":{"k":1}})", "'metadata.k'"},
      {R"({"input":"x","text":{"format":{"type":"json_schema","name":"s","schema":
          {"type":"object","properties":{"a":{"type":"integer","minimum":3}}}}}})",
       "'text.format.schema'"},
      {R"({"input":"x","tools":[{"type":"web_search"}]})", "'tools[0].type'"},
      {R"({"input":[{"type":"function_call_output","output":"x"}]})", "'input[0].call_id'"},
      {R"({"input":"x","background":true})", "'background'"},
      {"{", "JSON"},
  };
  for (const auto& [body, field] : cases) {
    auto r = Parse(body, backend);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(field), std::string::npos)
        << body << " → " << r.status().ToString();
  }
  auto missing = Parse(R"({"input":"x","previous_response_id":"resp_nope"})", backend);
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'previous_response_id'"), std::string::npos);
}

TEST(ResponsesRequest, TextFormatCompilesAGrammar) {
  FakeBackend backend;
  auto schema = Parse(R"({"input":"x","text":{"format":{"type":"json_schema","name":"p",
      "schema":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},
      "required":["b","a"]},"strict":true}}})",
                      backend);
  ASSERT_TRUE(schema.ok()) << schema.status().ToString();
  EXPECT_NE(schema->generation.grammar, nullptr);
  auto object = Parse(R"({"input":"x","text":{"format":{"type":"json_object"}}})", backend);
  ASSERT_TRUE(object.ok()) << object.status().ToString();
  EXPECT_NE(object->generation.grammar, nullptr);
  auto text = Parse(R"({"input":"x","text":{"format":{"type":"text"}}})", backend);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->generation.grammar, nullptr);
}

// Function tools: calls become function_call items (streamed as their arguments come) and the
// record's conversation; a function_call_output continues the chain in the model's tool format.
TEST(ResponsesTools, CallsAndTheirOutputs) {
  FakeBackend backend;
  const std::string tools = R"("tools": [{"type": "function", "name": "add", "description": "Adds",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}}, "required": ["a", "b"]}}], "tool_choice": "required")";
  auto r = Parse(R"({"input": "1+2?", "stream": true, )" + tools + "}", backend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->generation.grammar, nullptr);
  ReplyFormat& reply = *r->reply;
  std::string sse = reply.StreamStart({});
  const std::string out = R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})";
  for (size_t i = 0; i < out.size(); i += 6) sse += reply.StreamText(out.substr(i, 6));
  GenerationResult ended;
  ended.usage = {.prompt_tokens = 10, .cached_tokens = 0, .completion_tokens = 5};
  sse += reply.StreamEnd(ended);
  std::vector<std::string> types;
  std::string args;
  Json last;
  for (const testing::SseEvent& e : ParseSse(sse)) {
    last = ParseJson(e.data);
    if (types.empty() || types.back() != e.event) types.push_back(e.event);
    if (e.event == "response.function_call_arguments.delta") args += last["delta"];
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added",
                "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done", "response.completed"}));
  EXPECT_EQ(args, R"({"a":1,"b":2})");
  const Json& response = last["response"];
  ASSERT_EQ(response["output"].size(), 1u);
  const Json& call = response["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "add");
  EXPECT_EQ(call["arguments"], args);
  EXPECT_EQ(call["status"], "completed");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("fc_"));
  EXPECT_EQ(response["tools"][0]["name"], "add");
  EXPECT_EQ(response["tool_choice"], "required");

  const std::string id = response["id"];
  auto next = Parse(R"({"input": [{"type": "function_call_output", "call_id": ")" +
                        call["call_id"].get<std::string>() + R"(", "output": "3"}],
                        "previous_response_id": ")" +
                        id + R"(", )" + tools + "}",
                    backend);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  const std::vector<ChatMessage>& m = next->generation.messages;
  EXPECT_EQ(next->generation.agent.id, id);
  ASSERT_EQ(m.size(), 4u);  // tools (system), user, the call, its output
  EXPECT_EQ(m[2].content, R"({"tool_calls":[{"name":"add","arguments":{"a":1,"b":2}}]})");
  EXPECT_EQ(m[3].content, R"({"tool_response":{"name":"add","content":"3"}})");

  // Resent as items: a reply's text and its call are one assistant message.
  auto items = Parse(R"({"input": [{"role": "user", "content": "1+2?"},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Adding."}]},
      {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\":1,\"b\":2}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "3"}], )" +
                         tools + "}",
                     backend);
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  ASSERT_EQ(items->generation.messages.size(), 4u);
  EXPECT_EQ(items->generation.messages[2].role, "assistant");
  EXPECT_NE(items->generation.messages[2].content.find("Adding."), std::string::npos);
  EXPECT_NE(items->generation.messages[2].content.find(R"("name":"add")"), std::string::npos);

  // A whole reply: the call as an output item too.
  auto whole = Parse(R"({"input": "1+2?", )" + tools + "}", backend);
  ASSERT_TRUE(whole.ok());
  const Json body = ParseJson(whole->reply->Complete(out, ended));
  EXPECT_EQ(body["output"][0]["type"], "function_call");
  EXPECT_EQ(body["output"][0]["arguments"], R"({"a":1,"b":2})");
}

TEST(Responses, CreateRetrieveDelete) {
  ServerFixture f;
  auto res = f.Post("/v1/responses", R"({"model":"m","input":"hello there","metadata":{"k":"v"}})");
  ASSERT_EQ(res->status, 200) << res->body;
  const Json r = ParseJson(res->body);
  const std::string id = r["id"];
  EXPECT_TRUE(id.starts_with("resp_"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["model"], "fake-model");
  EXPECT_EQ(r["store"], true);
  EXPECT_EQ(r["metadata"]["k"], "v");
  EXPECT_TRUE(r["previous_response_id"].is_null());
  EXPECT_TRUE(r["error"].is_null());
  EXPECT_EQ(r["text"]["format"]["type"], "text");
  ASSERT_EQ(r["output"].size(), 1u);
  const Json& item = r["output"][0];
  EXPECT_EQ(item["type"], "message");
  EXPECT_EQ(item["role"], "assistant");
  EXPECT_EQ(item["status"], "completed");
  EXPECT_TRUE(std::string(item["id"]).starts_with("msg_"));
  EXPECT_EQ(item["content"][0]["type"], "output_text");
  EXPECT_EQ(item["content"][0]["text"], "Echo: hello there");
  EXPECT_EQ(item["content"][0]["annotations"], Json::array());
  const Json& u = r["usage"];
  EXPECT_EQ(u["output_tokens"], 3);
  EXPECT_EQ(u["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int>() + 3);
  EXPECT_EQ(f.backend().last_request().agent.id, id);

  auto got = f.Get("/v1/responses/" + id);
  ASSERT_EQ(got->status, 200) << got->body;
  EXPECT_EQ(ParseJson(got->body), r);

  auto deleted = f.Delete("/v1/responses/" + id);
  ASSERT_EQ(deleted->status, 200) << deleted->body;
  EXPECT_EQ(ParseJson(deleted->body),
            (Json{{"id", id}, {"object", "response"}, {"deleted", true}}));
  auto gone = f.Get("/v1/responses/" + id);
  EXPECT_EQ(gone->status, 404);
  EXPECT_EQ(ParseJson(gone->body)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(f.Delete("/v1/responses/" + id)->status, 404);
  EXPECT_EQ(f.Get("/v1/responses/resp_unknown")->status, 404);
  EXPECT_EQ(f.Post("/v1/responses", R"({"input":[]})")->status, 400);
  EXPECT_EQ(f.Get("/v1/responses")->status, 405);
}

TEST(Responses, ChainContinuesTheAgentWithoutResending) {
  ServerFixture f;
  auto first = f.Post("/v1/responses", R"({"input":"one","instructions":"sys A"})");
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string id1 = ParseJson(first->body)["id"];
  auto second = f.Post(
      "/v1/responses",
      Json{{"input", "two"}, {"instructions", "sys A"}, {"previous_response_id", id1}}.dump());
  ASSERT_EQ(second->status, 200) << second->body;
  const Json r2 = ParseJson(second->body);
  EXPECT_EQ(r2["previous_response_id"], id1);
  GenerationRequest g = f.backend().last_request();
  EXPECT_EQ(g.agent.id, id1);  // the chain's agent
  EXPECT_EQ(Lines(g.messages), (std::vector<std::string>{"system: sys A", "user: one",
                                                         "assistant: Echo: one", "user: two"}));
  // The fake's cache holds the previous prompt and reply as it rendered them: the whole
  // previous prompt matches (the fake renders the reply without its role).
  const int64_t cached = r2["usage"]["input_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, ParseJson(first->body)["usage"]["input_tokens"].get<int64_t>());

  // Instructions are not carried over; a branch from the first response runs on its agent too.
  auto branch =
      f.Post("/v1/responses", Json{{"input", "three"}, {"previous_response_id", id1}}.dump());
  ASSERT_EQ(branch->status, 200) << branch->body;
  g = f.backend().last_request();
  EXPECT_EQ(g.agent.id, id1);
  EXPECT_EQ(Lines(g.messages),
            (std::vector<std::string>{"user: one", "assistant: Echo: one", "user: three"}));

  const std::string id2 = r2["id"];
  auto third =
      f.Post("/v1/responses", Json{{"input", "four"}, {"previous_response_id", id2}}.dump());
  ASSERT_EQ(third->status, 200);
  EXPECT_EQ(Lines(f.backend().last_request().messages),
            (std::vector<std::string>{"user: one", "assistant: Echo: one", "user: two",
                                      "assistant: Echo: two", "user: four"}));
}

TEST(Responses, StreamEvents) {
  ServerFixture f;
  auto res = f.Post("/v1/responses", R"({"input":"a b c","stream":true})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<testing::SseEvent> events = ParseSse(res->body);
  std::vector<std::string> types;
  std::string deltas;
  Json last;
  for (size_t i = 0; i < events.size(); ++i) {
    const Json d = ParseJson(events[i].data);
    EXPECT_EQ(d["type"], events[i].event);
    EXPECT_EQ(d["sequence_number"], static_cast<int>(i));
    if (types.empty() || types.back() != events[i].event) types.push_back(events[i].event);
    if (events[i].event == "response.output_text.delta") {
      deltas += d["delta"].get<std::string>();
      EXPECT_EQ(d["output_index"], 0);
      EXPECT_EQ(d["content_index"], 0);
    }
    if (events[i].event == "response.output_text.done") {
      EXPECT_EQ(d["text"], "Echo: a b c");
    }
    last = d;
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(deltas, "Echo: a b c");
  const Json& r = last["response"];
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], deltas);
  EXPECT_EQ(r["usage"]["output_tokens"], 4);
  // What streamed was stored.
  auto got = f.Get("/v1/responses/" + r["id"].get<std::string>());
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(ParseJson(got->body), r);
}

TEST(Responses, MaxOutputTokensEndsIncomplete) {
  ServerFixture f;
  auto res = f.Post("/v1/responses", R"({"input":"[words:10]","max_output_tokens":3})");
  ASSERT_EQ(res->status, 200);
  const Json r = ParseJson(res->body);
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "w0 w1 w2");
  auto stream =
      f.Post("/v1/responses", R"({"input":"[words:10]","max_output_tokens":3,"stream":true})");
  const std::vector<testing::SseEvent> events = ParseSse(stream->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "response.incomplete");
}

TEST(Responses, StoreFalseKeepsNothing) {
  ServerFixture f;
  auto res = f.Post("/v1/responses", R"({"input":"x","store":false})");
  ASSERT_EQ(res->status, 200);
  const Json r = ParseJson(res->body);
  EXPECT_EQ(r["store"], false);
  EXPECT_EQ(f.backend().last_request().agent.id, "");
  EXPECT_EQ(f.backend().stored_responses(), 0u);
  EXPECT_EQ(f.Get("/v1/responses/" + r["id"].get<std::string>())->status, 404);
  EXPECT_EQ(f.Post("/v1/responses", Json{{"input", "y"}, {"previous_response_id", r["id"]}}.dump())
                ->status,
            404);
}

TEST(Responses, TenantsDoNotSeeEachOthersResponses) {
  HttpServerOptions o;
  o.api_keys = {{"key-a", "tenant-a"}, {"key-b", "tenant-b"}};
  ServerFixture f(o);
  const httplib::Headers a = {{"Authorization", "Bearer key-a"}};
  const httplib::Headers b = {{"Authorization", "Bearer key-b"}};
  EXPECT_EQ(f.Post("/v1/responses", R"({"input":"x"})")->status, 401);
  auto res = f.Post("/v1/responses", R"({"input":"secret"})", a);
  ASSERT_EQ(res->status, 200);
  const std::string id = ParseJson(res->body)["id"];
  EXPECT_EQ(f.backend().last_request().agent.tenant, "tenant-a");
  EXPECT_EQ(f.Get("/v1/responses/" + id, a)->status, 200);
  EXPECT_EQ(f.Get("/v1/responses/" + id, b)->status, 404);
  EXPECT_EQ(f.Delete("/v1/responses/" + id, b)->status, 404);
  EXPECT_EQ(
      f.Post("/v1/responses", Json{{"input", "y"}, {"previous_response_id", id}}.dump(), b)->status,
      404);
  EXPECT_EQ(f.Get("/v1/responses/" + id, a)->status, 200);
}

TEST(Responses, FailuresAreOpenAiErrors) {
  ServerFixture f;
  auto before = f.Post("/v1/responses", R"({"input":"[error:resource]"})");
  EXPECT_EQ(before->status, 503);
  EXPECT_EQ(f.backend().stored_responses(), 0u);
  auto midway = f.Post("/v1/responses", R"({"input":"[error-midway]","stream":true})");
  ASSERT_EQ(midway->status, 200);
  const std::vector<testing::SseEvent> events = ParseSse(midway->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "response.failed");
  EXPECT_EQ(ParseJson(events.back().data)["response"]["status"], "failed");
  EXPECT_EQ(f.backend().stored_responses(), 0u);
}

}  // namespace
}  // namespace kvmem::serve
