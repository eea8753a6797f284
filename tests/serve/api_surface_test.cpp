// The API surface around generation, over the FakeBackend: agent paths read from the raw target,
// /tokenize and /detokenize, count_tokens, /v1/embeddings (float and base64), CORS.
#include <gtest/gtest.h>

#include <cstring>

#include "core/base64.h"
#include "serve/agent_path.h"
#include "serve/cors.h"
#include "serve/embeddings_api.h"
#include "serve/tokenize_api.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

TEST(AgentPath, TheIdIsDecodedAfterTheSplit) {
  EXPECT_EQ(ParseAgentPath("/v1/agents/alice%40example.com").value().id, "alice@example.com");
  EXPECT_EQ(ParseAgentPath("/v1/agents/a%2Fb?x=1").value().id, "a/b");
  const AgentPath encoded = ParseAgentPath("/v1/agents/a%2Frebuild").value();
  EXPECT_EQ(encoded.id, "a/rebuild");
  EXPECT_EQ(encoded.resource, AgentResource::kAgent);
  const AgentPath rebuild = ParseAgentPath("/v1/agents/a/rebuild").value();
  EXPECT_EQ(rebuild.id, "a");
  EXPECT_EQ(rebuild.resource, AgentResource::kRebuild);
  EXPECT_EQ(ParseAgentPath("/v1/agents/a/memory").value().resource, AgentResource::kMemory);
  EXPECT_EQ(ParseAgentPath("/v1/agents/a%2Fturns").value().resource, AgentResource::kAgent);
  EXPECT_EQ(ParseAgentPath("/v1/agents/a/turns?x=1").value().resource, AgentResource::kTurns);
  EXPECT_EQ(ParseAgentPath("/v1/agents/%E7%94%A8+1").value().id, "\xE7\x94\xA8+1");
  EXPECT_EQ(ParseAgentPath("/v1/agents/a/b").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ParseAgentPath("/v1/agents/").status().code(), ErrorCode::kInvalidArgument);
  for (const char* bad : {"/v1/agents/a%2", "/v1/agents/a%zz", "/v1/agents/a%00b"}) {
    const Status s = ParseAgentPath(bad).status();
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_TRUE(s.message().starts_with("'path': ")) << s.message();
  }
}

TEST(AgentPath, RoutesTakeEncodedIds) {
  ServerFixture f;
  ASSERT_EQ(f.Post("/v1/agents", R"({"id": "alice@example.com"})")->status, 200);
  ASSERT_EQ(f.Post("/v1/agents", R"({"id": "a/rebuild"})")->status, 200);
  auto got = f.Get("/v1/agents/alice%40example.com");
  ASSERT_TRUE(got);
  EXPECT_EQ(ParseJson(got->body)["id"], "alice@example.com");
  EXPECT_EQ(ParseJson(f.Get("/v1/agents/a%2Frebuild")->body)["id"], "a/rebuild");
  EXPECT_EQ(f.Post("/v1/agents/a%2Frebuild", "{}")->status, 405);
  EXPECT_EQ(f.Post("/v1/agents/a%2Frebuild/rebuild", "{}")->status, 200);
  EXPECT_EQ(f.Delete("/v1/agents/alice%40example.com")->status, 200);
  EXPECT_EQ(f.Get("/v1/agents/alice%40example.com")->status, 404);
  auto nul = f.Get("/v1/agents/a%00b");
  EXPECT_EQ(nul->status, 400);
  EXPECT_EQ(ParseJson(nul->body)["error"]["param"], "path");
}

TEST(Tokenize, RequestsAndReplies) {
  const TokenizeRequest r = ParseTokenizeRequest(R"({"content": "hi"})").value();
  EXPECT_EQ(r.content, "hi");
  EXPECT_FALSE(r.add_special);
  EXPECT_TRUE(r.parse_special);
  EXPECT_FALSE(r.with_pieces);
  EXPECT_EQ(ParseTokenizeRequest("{}").status().message(), "'content': required");
  EXPECT_EQ(TokenizeJson({{7, "a"}, {8, "\xF0\x9F"}}, false), R"({"tokens":[7,8]})");
  EXPECT_EQ(TokenizeJson({{7, "a"}, {8, "\xF0\x9F"}}, true),
            R"({"tokens":[{"id":7,"piece":"a"},{"id":8,"piece":[240,159]}]})");
  EXPECT_EQ(ParseDetokenizeRequest(R"({"tokens": [1, 2]})").value(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ParseDetokenizeRequest(R"({"tokens": [1, 4294967296]})").status().message(),
            "'tokens[1]': is not a token id");
  EXPECT_EQ(ParseDetokenizeRequest(R"({"tokens": [1, "x"]})").status().message(),
            "'tokens[1]': expected an integer, got string");

  ServerFixture f;
  auto tok = f.Post("/tokenize", R"({"content": "ab", "add_special": true})");
  ASSERT_TRUE(tok);
  EXPECT_EQ(ParseJson(tok->body), Json::parse(R"({"tokens":[256,97,98]})"));
  auto detok = f.Post("/detokenize", R"({"tokens": [256, 97, 98]})");
  EXPECT_EQ(ParseJson(detok->body), Json::parse(R"({"content":"ab"})"));
  EXPECT_EQ(f.Get("/tokenize")->status, 405);
}

TEST(CountTokens, CountsTheRenderedPrompt) {
  ServerFixture f;
  auto n = f.Post("/v1/messages/count_tokens",
                  R"({"model": "m", "messages": [{"role": "user", "content": "hello"}]})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 200) << n->body;
  EXPECT_GT(ParseJson(n->body)["input_tokens"].get<int>(), 5);
  auto bad = f.Post("/v1/messages/count_tokens", R"({"messages": []})");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(ParseJson(bad->body)["error"]["type"], "invalid_request_error");  // Anthropic's
}

TEST(Embeddings, FloatAndBase64) {
  EXPECT_EQ(ParseEmbeddingsRequest(R"({"input": "a"})").value().texts,
            std::vector<std::string>{"a"});
  EXPECT_EQ(ParseEmbeddingsRequest(R"({"input": []})").status().message(),
            "'input': must not be empty");
  EXPECT_EQ(ParseEmbeddingsRequest(R"({"input": [1, 2]})").status().code(),
            ErrorCode::kUnsupported);
  EXPECT_EQ(ParseEmbeddingsRequest(R"({"input": "a", "encoding_format": "hex"})").status().code(),
            ErrorCode::kInvalidArgument);

  ServerFixture f;
  auto floats = f.Post("/v1/embeddings", R"({"input": ["abc", ""], "model": "x"})");
  ASSERT_TRUE(floats);
  ASSERT_EQ(floats->status, 200) << floats->body;
  const Json j = ParseJson(floats->body);
  EXPECT_EQ(j["model"], "fake-encoder");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["embedding"], Json::parse("[0.0, 1.0]"));
  auto b64 = f.Post("/v1/embeddings", R"({"input": "abc", "encoding_format": "base64"})");
  const std::string bytes =
      Base64Decode(ParseJson(b64->body)["data"][0]["embedding"].get<std::string>(), "e").value();
  ASSERT_EQ(bytes.size(), 8u);
  float v[2];
  std::memcpy(v, bytes.data(), 8);
  EXPECT_EQ(v[0], j["data"][0]["embedding"][0].get<float>());
  EXPECT_EQ(v[1], j["data"][0]["embedding"][1].get<float>());
  auto dims = f.Post("/v1/embeddings", R"({"input": "abc", "dimensions": 3})");
  EXPECT_EQ(ParseJson(dims->body)["error"]["param"], "dimensions");
}

TEST(Cors, PreflightAndHeaders) {
  const CorsPolicy none;
  EXPECT_FALSE(none.Grants("https://a.example"));
  EXPECT_TRUE(none.Allows("http://127.0.0.1:8080", "127.0.0.1:8080"));  // the server's own
  EXPECT_FALSE(none.Allows("http://evil.example", "127.0.0.1:8080"));
  const CorsPolicy any({"*"});
  EXPECT_TRUE(any.Grants("https://x.example"));
  EXPECT_EQ(any.AllowOriginValue("https://x.example"), "*");

  HttpServerOptions options;
  options.cors_origins = {"https://app.example"};
  ServerFixture f(options);
  const httplib::Headers preflight = {{"Origin", "https://app.example"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "content-type"}};
  auto ok = f.Client()->Options("/v1/chat/completions", preflight);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 204);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Headers"), "content-type");
  auto chat = f.Post("/v1/chat/completions", ChatBody("hi"), {{"Origin", "https://app.example"}});
  EXPECT_EQ(chat->status, 200);
  EXPECT_EQ(chat->get_header_value("Access-Control-Allow-Origin"), "https://app.example");

  auto other = f.Client()->Options(
      "/v1/chat/completions",
      {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(other->status, 204);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Methods"));
  auto refused = f.Post("/v1/messages", R"({"max_tokens": 2, "messages": []})",
                        {{"Origin", "https://evil.example"}});
  EXPECT_EQ(refused->status, 403);
  EXPECT_EQ(ParseJson(refused->body)["error"]["type"], "permission_error");
  EXPECT_EQ(f.backend().calls(), 1);  // the refused request never ran
}

}  // namespace
}  // namespace kvmem::serve::testing
