// The segment routes of the agents API (serve/agents_api.h: GET /v1/agents/{id}/segments, PUT
// and DELETE /v1/agents/{id}/segments/{name}) over the fake backend: shapes, names read from the
// path as sent (percent-decoded once), the errors in the API's format (an agent of another
// policy, bad names and bodies, unknown agents and segments, wrong methods), tenants and keys.
#include <gtest/gtest.h>

#include "serve/agent_path.h"
#include "serve/agents_api.h"
#include "serve_test_util.h"

namespace kvmem::serve::testing {
namespace {

class SegmentsApiTest : public ::testing::Test {
 protected:
  httplib::Result Put(const std::string& path, const std::string& body,
                      const httplib::Headers& headers = {}) {
    return f_.Client()->Put(path.c_str(), headers, body, "application/json");
  }
  void CreateAgent(const std::string& id, const std::string& policy,
                   const httplib::Headers& headers = {}) {
    const Json body = {{"id", id}, {"memory", {{"policy", policy}}}};
    auto r = f_.Post("/v1/agents", body.dump(), headers);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  // The error body's message, after checking the status and OpenAI's shape.
  std::string Error(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return "";
    EXPECT_EQ(r->status, status) << r->body;
    const Json j = ParseJson(r->body);
    EXPECT_TRUE(j.contains("error")) << r->body;
    return j.value("error", Json::object()).value("message", "");
  }

  ServerFixture f_;
};

TEST_F(SegmentsApiTest, PutListReplaceAndDelete) {
  CreateAgent("ada", "keep");
  auto put = Put("/v1/agents/ada/segments/kitchen", R"({"text": "The red door is locked."})");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 200) << put->body;
  EXPECT_EQ(ParseJson(put->body), Json::parse(R"({"object": "agent.segment", "name": "kitchen",
    "text": "The red door is locked.", "group": -1, "static": false, "tokens": 24})"));
  // A name of any UTF-8 but '/' and controls, sent percent-encoded.
  auto odd = Put("/v1/agents/ada/segments/caf%C3%A9%20%40%25", R"({"text": "x"})");
  ASSERT_EQ(odd->status, 200) << odd->body;
  EXPECT_EQ(ParseJson(odd->body)["name"], "caf\xC3\xA9 @%");
  ASSERT_EQ(Put("/v1/agents/ada/segments/kitchen", R"({"text": "The door is open."})")->status,
            200);

  auto list = f_.Get("/v1/agents/ada/segments");
  ASSERT_EQ(list->status, 200) << list->body;
  const Json l = ParseJson(list->body);
  EXPECT_EQ(l["object"], "list");
  ASSERT_EQ(l["data"].size(), 2u);
  EXPECT_EQ(l["data"][0]["name"], "kitchen");
  EXPECT_EQ(l["data"][0]["text"], "The door is open.");
  EXPECT_EQ(l["data"][0]["object"], "agent.segment");
  for (const char* field : {"group", "static"}) EXPECT_TRUE(l["data"][0].contains(field));

  auto del = f_.Delete("/v1/agents/ada/segments/kitchen");
  ASSERT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(ParseJson(del->body), Json::parse(R"({"object": "agent.segment.deleted",
    "name": "kitchen", "deleted": true})"));
  EXPECT_EQ(ParseJson(f_.Get("/v1/agents/ada/segments")->body)["data"].size(), 1u);
  EXPECT_NE(Error(f_.Delete("/v1/agents/ada/segments/kitchen"), 404).find("kitchen"),
            std::string::npos);
}

TEST_F(SegmentsApiTest, AnAgentOfAnotherPolicyIsRefused) {
  CreateAgent("bob", "full");
  const std::string why = Error(f_.Get("/v1/agents/bob/segments"), 400);
  EXPECT_NE(why.find("segments need the keep policy"), std::string::npos) << why;
  Error(Put("/v1/agents/bob/segments/a", R"({"text": "x"})"), 400);
  Error(f_.Delete("/v1/agents/bob/segments/a"), 400);
  Error(f_.Get("/v1/agents/nobody/segments"), 404);
  Error(Put("/v1/agents/nobody/segments/a", R"({"text": "x"})"), 404);
}

TEST_F(SegmentsApiTest, BadNamesAndBodiesAreClear400s) {
  CreateAgent("ada", "keep");
  // A name with '/' (encoded or not), a control character, too long, bad escapes, not UTF-8.
  for (const std::string& name :
       {std::string("a%2Fb"), std::string("tab%09x"), std::string(129, 'n'), std::string("bad%zz"),
        std::string("%FF"), std::string("c1%C2%85")}) {
    const std::string why = Error(Put("/v1/agents/ada/segments/" + name, R"({"text": "x"})"), 400);
    EXPECT_NE(why.find("path"), std::string::npos) << name << ": " << why;
  }
  EXPECT_EQ(Put("/v1/agents/ada/segments/" + std::string(128, 'n'), R"({"text": "x"})")->status,
            200);
  // "a/b" unencoded too.
  Error(Put("/v1/agents/ada/segments/a/b", R"({"text": "x"})"), 400);
  // Bodies: not JSON, no text, text not a string, unknown field, too long, not UTF-8.
  EXPECT_NE(Error(Put("/v1/agents/ada/segments/a", "{"), 400).size(), 0u);
  EXPECT_NE(Error(Put("/v1/agents/ada/segments/a", "{}"), 400).find("text"), std::string::npos);
  EXPECT_NE(Error(Put("/v1/agents/ada/segments/a", R"({"text": 3})"), 400).find("text"),
            std::string::npos);
  EXPECT_NE(
      Error(Put("/v1/agents/ada/segments/a", R"({"text": "x", "group": 2})"), 400).find("group"),
      std::string::npos);
  const Json big = {{"text", std::string(memory::kMaxSegmentTextBytes + 1, 'x')}};
  EXPECT_NE(Error(Put("/v1/agents/ada/segments/a", big.dump()), 400).find("text"),
            std::string::npos);
  EXPECT_EQ(Put("/v1/agents/ada/segments/a", "{\"text\": \"\xff\"}")->status, 400);
  // A write the backend refuses changes nothing.
  ASSERT_EQ(Put("/v1/agents/ada/segments/a", R"({"text": "old"})")->status, 200);
  Error(Put("/v1/agents/ada/segments/a", R"({"text": "new [error:internal]"})"), 500);
  EXPECT_EQ(ParseJson(f_.Get("/v1/agents/ada/segments")->body)["data"][1]["text"], "old");
}

TEST_F(SegmentsApiTest, WrongMethodsAre405WithAllow) {
  CreateAgent("ada", "keep");
  auto post = f_.Post("/v1/agents/ada/segments", "{}");
  Error(post, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET");
  auto get_one = f_.Get("/v1/agents/ada/segments/a");
  Error(get_one, 405);
  EXPECT_EQ(get_one->get_header_value("Allow"), "PUT, DELETE");
}

TEST_F(SegmentsApiTest, KeysAndTenants) {
  HttpServerOptions o;
  o.api_keys = {{"key-a", "tenant-a"}, {"key-b", "tenant-b"}};
  ServerFixture f(o);
  const httplib::Headers a = {{"Authorization", "Bearer key-a"}};
  const httplib::Headers b = {{"Authorization", "Bearer key-b"}};
  const Json body = {{"id", "ada"}, {"memory", {{"policy", "keep"}}}};
  ASSERT_EQ(f.Post("/v1/agents", body.dump(), a)->status, 200);
  EXPECT_EQ(
      f.Client()->Put("/v1/agents/ada/segments/x", R"({"text": "t"})", "application/json")->status,
      401);
  EXPECT_EQ(f.Client()
                ->Put("/v1/agents/ada/segments/x", a, R"({"text": "t"})", "application/json")
                ->status,
            200);
  EXPECT_EQ(f.Get("/v1/agents/ada/segments", b)->status, 404);  // tenant b has no such agent
  EXPECT_EQ(ParseJson(f.Get("/v1/agents/ada/segments", a)->body)["data"].size(), 1u);
}

TEST(SegmentsApi, PathsNameTheSegment) {
  auto p = ParseAgentPath("/v1/agents/a%2Fb/segments/x%20y?z=1");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->id, "a/b");
  EXPECT_EQ(p->resource, AgentResource::kSegment);
  EXPECT_EQ(p->segment, "x y");
  auto all = ParseAgentPath("/v1/agents/a/segments");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->resource, AgentResource::kSegments);
  EXPECT_EQ(ParseAgentPath("/v1/agents/a/segments/").status().code(),
            ErrorCode::kInvalidArgument);  // an empty name
  EXPECT_EQ(ParseAgentPath("/v1/agents/a/segmentsx").status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvmem::serve::testing
