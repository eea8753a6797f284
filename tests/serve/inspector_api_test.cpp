// The memory inspector's endpoints (serve/inspector_api.h) and page (serve/ui_assets.h) over the
// fake backend: JSON shapes, tenants, 404s and 405s in the API's error format, the page's files
// and headers.
#include "serve/inspector_api.h"

#include <gtest/gtest.h>

#include "serve/ui_assets.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

TEST(InspectorApi, MemoryJsonCarriesTheTextAndThePolicysView) {
  const memory::AgentMemoryView view{
      .policy = "memart",
      .text = "caf\xC3\xA9 au lait",
      .rows = 7,
      .memory = {{"cached", {0, 13}},
                 {"parts", {{{"kind", "block"}, {"block", 0}, {"bytes", {0, 5}}}}}}};
  EXPECT_EQ(Json::parse(AgentMemoryJson("a/b", view)), Json::parse(R"({
    "id": "a/b", "object": "agent.memory", "policy": "memart", "rows": 7,
    "text": "café au lait", "cached": [0, 13],
    "parts": [{"kind": "block", "block": 0, "bytes": [0, 5]}]})"));
  // A policy that says nothing: empty lists, never a missing field.
  const Json bare = Json::parse(
      AgentMemoryJson("x", {.policy = "none", .text = "", .rows = 0, .memory = nullptr}));
  EXPECT_EQ(bare["cached"], Json::array());
  EXPECT_EQ(bare["parts"], Json::array());
  EXPECT_EQ(bare["text"], "");
  EXPECT_FALSE(bare.contains("note"));
  // A policy's note on what "cached" means for it is passed on.
  const Json noted = Json::parse(AgentMemoryJson(
      "x", {.policy = "p", .text = "", .rows = 0, .memory = {{"note", "the tail only"}}}));
  EXPECT_EQ(noted["note"], "the tail only");
}

TEST(InspectorApi, TurnsJsonListsTheRecordsOldestFirst) {
  const std::vector<memory::TurnRecord> turns = {{.turn = 1,
                                                  .at_unix_ms = 5,
                                                  .prompt_tokens = 9,
                                                  .cached_tokens = 0,
                                                  .report = {{"blocks", Json::array()}},
                                                  .detail = nullptr},
                                                 {.turn = 2,
                                                  .at_unix_ms = 6,
                                                  .prompt_tokens = 12,
                                                  .cached_tokens = 4,
                                                  .tier = memory::Tier::kWarm,
                                                  .load_ms = 3.5,
                                                  .report = {{"episode", 1}},
                                                  .detail = {{"ranks", Json::array()}}}};
  const Json j = Json::parse(AgentTurnsJson("ada", turns));
  EXPECT_EQ(j["id"], "ada");
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0], Json::parse(R"({"object": "agent.turn", "turn": 1, "created_ms": 5,
    "prompt_tokens": 9, "cached_tokens": 0, "tier": "miss", "load_ms": 0,
    "report": {"blocks": []}, "detail": null})"));
  EXPECT_EQ(j["data"][1]["cached_tokens"], 4);
  EXPECT_EQ(j["data"][1]["tier"], "warm");
  EXPECT_EQ(j["data"][1]["load_ms"], 3.5);
  EXPECT_EQ(j["data"][1]["report"]["episode"], 1);
}

TEST(InspectorApi, EndpointsServeTheBackendsViewPerTenant) {
  HttpServerOptions o;
  o.api_keys = {{"key-a", "tenant-a"}, {"key-b", "tenant-b"}};
  ServerFixture f(o);
  const httplib::Headers a = {{"Authorization", "Bearer key-a"}};
  const httplib::Headers b = {{"Authorization", "Bearer key-b"}};
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("hello", {{"user", "ada@x"}}), a)->status, 200);
  ASSERT_EQ(f.Post("/v1/chat/completions", ChatBody("again", {{"user", "ada@x"}}), a)->status, 200);

  auto memory = f.Get("/v1/agents/ada%40x/memory", a);
  ASSERT_TRUE(memory);
  ASSERT_EQ(memory->status, 200) << memory->body;
  const Json m = ParseJson(memory->body);
  EXPECT_EQ(m["id"], "ada@x");
  EXPECT_EQ(m["object"], "agent.memory");
  EXPECT_EQ(m["policy"], "full");
  EXPECT_NE(m["text"].get<std::string>().find("user: again"), std::string::npos);
  EXPECT_EQ(m["cached"], Json::array({0, m["text"].get<std::string>().size()}));

  auto turns = f.Get("/v1/agents/ada%40x/turns", a);
  ASSERT_TRUE(turns);
  ASSERT_EQ(turns->status, 200) << turns->body;
  const Json t = ParseJson(turns->body);
  ASSERT_EQ(t["data"].size(), 2u);
  EXPECT_EQ(t["data"][0]["turn"], 1);
  EXPECT_EQ(t["data"][1]["turn"], 2);
  EXPECT_GT(t["data"][1]["cached_tokens"].get<int>(), 0);
  EXPECT_GT(t["data"][1]["report"]["prefill_tokens"].get<int>(), 0);

  // Another tenant, an unknown agent: 404 in the API's error format; no key: 401.
  for (const char* path : {"/v1/agents/ada%40x/memory", "/v1/agents/ada%40x/turns"}) {
    auto other = f.Get(path, b);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 404);
    EXPECT_EQ(ParseJson(other->body)["error"]["message"], "no agent 'ada@x'");
    EXPECT_EQ(f.Get(path)->status, 401);
  }
  EXPECT_EQ(f.Get("/v1/agents/nobody/turns", a)->status, 404);
  // The id is read as sent: "ada%40x%2Fmemory" is the agent "ada@x/memory", not its memory.
  EXPECT_EQ(f.Get("/v1/agents/ada%40x%2Fmemory", a)->status, 404);
  EXPECT_EQ(f.Get("/v1/agents/ada%zz/memory", a)->status, 400);
  auto post = f.Post("/v1/agents/ada%40x/memory", "", a);
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
}

TEST(UiAssets, ThePageAndItsFilesAreEmbedded) {
  for (const char* path : {"/ui", "/ui/", "/ui/index.html"}) {
    const UiAsset* page = FindUiAsset(path);
    ASSERT_NE(page, nullptr) << path;
    EXPECT_EQ(page->name, "index.html");
    EXPECT_EQ(page->content_type, "text/html; charset=utf-8");
    EXPECT_NE(page->body.find("/ui/app.js"), std::string_view::npos);
  }
  ASSERT_NE(FindUiAsset("/ui/app.js"), nullptr);
  EXPECT_EQ(FindUiAsset("/ui/app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(FindUiAsset("/ui/style.css")->content_type, "text/css; charset=utf-8");
  for (const char* bad :
       {"/ui/missing.js", "/ui/../ui/app.js", "/ui//app.js", "/uiapp.js", "/v1/ui/app.js", ""}) {
    EXPECT_EQ(FindUiAsset(bad), nullptr) << bad;
  }
}

TEST(UiAssets, ServedWithoutAKeyAndLockedDown) {
  HttpServerOptions o;
  o.api_keys = {{"key-a", "tenant-a"}};
  ServerFixture f(o);
  auto page = f.Get("/ui");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->body, std::string(FindUiAsset("/ui")->body));
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  // Only the page's own files and this server: text an agent wrote can never run as script.
  EXPECT_EQ(page->get_header_value("Content-Security-Policy").rfind("default-src 'self'", 0), 0u);
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  auto js = f.Get("/ui/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  auto missing = f.Get("/ui/nothing.css");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(ParseJson(missing->body)["error"]["message"], "no route for GET /ui/nothing.css");
  EXPECT_EQ(f.Post("/ui", "")->status, 404);
}

}  // namespace
}  // namespace kvmem::serve::testing
