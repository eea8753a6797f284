// The building blocks of request validation: UTF-8 checks, JSON bodies and typed fields, the
// shared field readers, and the one Status → HTTP mapping.
#include <gtest/gtest.h>

#include <string>

#include "serve/api_error.h"
#include "serve/json_body.h"
#include "serve/reply_format.h"
#include "serve/request_fields.h"
#include "serve/utf8.h"

namespace kvmem::serve {
namespace {

constexpr size_t npos = std::string_view::npos;

TEST(Utf8, AcceptsWellFormed) {
  EXPECT_EQ(FindInvalidUtf8(""), npos);
  EXPECT_EQ(FindInvalidUtf8("plain ascii\n"), npos);
  EXPECT_EQ(FindInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), npos);
  EXPECT_EQ(FindInvalidUtf8(std::string("nul\0inside", 10)), npos);
}

TEST(Utf8, RejectsIllFormed) {
  EXPECT_EQ(FindInvalidUtf8("ab\xFF"), 2u);            // never valid
  EXPECT_EQ(FindInvalidUtf8("\x80"), 0u);              // lone continuation
  EXPECT_EQ(FindInvalidUtf8("\xC0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(FindInvalidUtf8("\xC1\xBF"), 0u);          // overlong
  EXPECT_EQ(FindInvalidUtf8("\xE0\x80\x80"), 0u);      // overlong 3-byte
  EXPECT_EQ(FindInvalidUtf8("x\xED\xA0\x80"), 1u);     // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("\xF0\x80\x80\x80"), 0u);  // overlong 4-byte
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(FindInvalidUtf8("ok\xE2\x82"), 2u);  // truncated at the end
  EXPECT_EQ(FindInvalidUtf8("\xC3\x28"), 0u);    // bad continuation
}

TEST(Utf8, AssemblerJoinsSplitSequencesAndReplacesGarbage) {
  Utf8Assembler a;
  EXPECT_EQ(a.Push("caf\xC3"), "caf");
  EXPECT_EQ(a.Push("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(a.Push("\xF0\x9F"), "");
  EXPECT_EQ(a.Push("\x98"), "");
  EXPECT_EQ(a.Push("\x80"), "\xF0\x9F\x98\x80");
  // Each maximal invalid subpart becomes one U+FFFD.
  EXPECT_EQ(a.Push("\xFF"
                   "a"
                   "\xE2\x82"
                   "b"),
            "\xEF\xBF\xBD"
            "a"
            "\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(a.Push("\xE2\x82"), "");
  EXPECT_EQ(a.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(a.Flush(), "");
}

TEST(JsonBody, ParsesObjects) {
  auto v = ParseJsonObject(R"({"a": [1, {"b": "\u00e9"}]})");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ((*v)["a"][1]["b"], "\xC3\xA9");
}

TEST(JsonBody, RejectsBadBodies) {
  for (const char* body : {"", "{", "{\"a\":}", "[1,2]", "\"s\"", "42", "null", "{} extra",
                           "{\"a\": \"\\ud800\"}", "{\"a\": 1e999}", "{'a': 1}"}) {
    auto v = ParseJsonObject(body);
    ASSERT_FALSE(v.ok()) << body;
    EXPECT_EQ(v.status().code(), ErrorCode::kInvalidArgument) << body;
  }
  auto bad_utf8 = ParseJsonObject("{\"a\": \"x\xC3\x28\"}");
  ASSERT_FALSE(bad_utf8.ok());
  EXPECT_NE(bad_utf8.status().message().find("UTF-8 (byte offset 8)"), std::string::npos)
      << bad_utf8.status().message();
}

TEST(JsonBody, RejectsDeepNestingButNotBracketsInStrings) {
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  auto v = ParseJsonObject(deep);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("deeper than 64"), std::string::npos);
  std::string in_string = "{\"a\":\"" + std::string(1000, '[') + "\\\"\"}";
  EXPECT_TRUE(ParseJsonObject(in_string).ok());
}

TEST(JsonBody, TypedFieldsNameTheField) {
  const Json obj = Json::parse(
      R"({"i": 5, "f": 5.0, "s": "x", "b": true, "n": null, "big": 18446744073709551615})");
  EXPECT_EQ(*OptionalInt(obj, "i", "i").value(), 5);
  EXPECT_FALSE(OptionalInt(obj, "n", "n").value().has_value());
  EXPECT_FALSE(OptionalInt(obj, "absent", "absent").value().has_value());
  auto f = OptionalInt(obj, "f", "f");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "'f': expected an integer, got number");
  auto s = OptionalInt(obj, "s", "max_tokens");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "'max_tokens': expected an integer, got string");
  EXPECT_FALSE(OptionalInt(obj, "big", "big").ok());
  EXPECT_DOUBLE_EQ(*OptionalNumber(obj, "i", "i").value(), 5.0);
  EXPECT_EQ(OptionalBool(obj, "i", "i").status().message(), "'i': expected a boolean, got integer");
  EXPECT_EQ(RequiredString(obj, "n", "messages[0].role").status().message(),
            "'messages[0].role': required");
}

TEST(JsonBody, DumpNeverThrowsOnInvalidUtf8) {
  Json j = {{"text", std::string("a\xFF")}};
  EXPECT_EQ(DumpJson(j), "{\"text\":\"a\xEF\xBF\xBD\"}");
}

TEST(RequestFields, AgentIds) {
  EXPECT_TRUE(ValidateAgentId("alice", "user").ok());
  EXPECT_TRUE(ValidateAgentId("a.b_c-9", "user").ok());
  EXPECT_TRUE(ValidateAgentId("550e8400-e29b-41d4-a716-446655440000", "user").ok());
  EXPECT_TRUE(ValidateAgentId(std::string(256, 'a'), "user").ok());
  for (const char* any :
       {"a/b", "a b", ".", "..", "../x", "a@b.com", "caf\xC3\xA9", "%2F", "a:b"}) {
    EXPECT_TRUE(ValidateAgentId(any, "user").ok()) << any;
  }
  for (const std::string& bad : {std::string(), std::string(257, 'a'), std::string("a\nb"),
                                 std::string("a\0b", 3), std::string("caf\xE9")}) {
    const Status s = ValidateAgentId(bad, "user");
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_TRUE(s.message().starts_with("'user': agent id")) << s.message();
  }

  RequestContext ctx;
  EXPECT_EQ(ResolveAgentId(ctx, std::nullopt, "user").value(), "");
  EXPECT_EQ(ResolveAgentId(ctx, "bob", "user").value(), "bob");
  ctx.header_agent_id = "alice";
  EXPECT_EQ(ResolveAgentId(ctx, std::nullopt, "user").value(), "alice");
  EXPECT_EQ(ResolveAgentId(ctx, "alice", "user").value(), "alice");
  auto conflict = ResolveAgentId(ctx, "bob", "user");
  ASSERT_FALSE(conflict.ok());
  EXPECT_NE(conflict.status().message().find("X-Agent-Id"), std::string::npos);
  ctx.header_agent_id = "bad\tid";
  EXPECT_FALSE(ResolveAgentId(ctx, std::nullopt, "user").ok());
}

TEST(RequestFields, MaxTokensAndSampling) {
  const Json body = Json::parse(R"({"a": 0, "b": -5, "c": 4097, "d": 4096, "e": "x"})");
  for (const char* key : {"a", "b", "c", "e"}) EXPECT_FALSE(ReadMaxTokens(body, key, 4096).ok());
  EXPECT_EQ(ReadMaxTokens(body, "d", 4096).value(), 4096);
  EXPECT_FALSE(ReadMaxTokens(body, "absent", 4096).value().has_value());

  const SamplingLimits openai{.max_temperature = 2};
  auto p = ReadSamplingParams(
      Json::parse(R"({"temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0.1, "seed": -1})"),
      openai);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p->temperature, 0.0f);
  EXPECT_EQ(*p->top_k, 0);
  EXPECT_EQ(*p->seed, ~uint64_t{0});
  EXPECT_FALSE(p->repeat_penalty.has_value());
  for (const char* bad :
       {R"({"temperature": 2.5})", R"({"temperature": -0.1})", R"({"top_p": 0})",
        R"({"top_p": 1.01})", R"({"top_k": -2})", R"({"min_p": 2})", R"({"seed": 1.5})",
        R"({"temperature": "hot"})", R"({"repetition_penalty": 0})"}) {
    auto r = ReadSamplingParams(Json::parse(bad), openai);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_EQ(ReadSamplingParams(Json::parse(R"({"top_p": 0})"), openai).status().message(),
            "'top_p': must be in (0, 1], got 0");
  EXPECT_FALSE(ReadSamplingParams(Json::parse(R"({"temperature": 1.5})"),
                                  SamplingLimits{.max_temperature = 1})
                   .ok());
}

TEST(RequestFields, StopStringsAndContent) {
  const Json body = Json::parse(
      R"({"one": "x", "arr": ["a", "b"], "five": ["1","2","3","4","5"], "empty": [""],
          "num": [1], "obj": {}})");
  EXPECT_EQ(ReadStopStrings(body, "one", 4, true).value(), std::vector<std::string>{"x"});
  EXPECT_FALSE(ReadStopStrings(body, "one", 4, false).ok());
  EXPECT_EQ(ReadStopStrings(body, "arr", 4, true).value().size(), 2u);
  EXPECT_FALSE(ReadStopStrings(body, "five", 4, true).ok());
  EXPECT_FALSE(ReadStopStrings(body, "empty", 4, true).ok());
  EXPECT_EQ(ReadStopStrings(body, "num", 4, true).status().message(),
            "'num[0]': expected a string, got integer");
  EXPECT_FALSE(ReadStopStrings(body, "obj", 4, true).ok());
  EXPECT_TRUE(ReadStopStrings(body, "absent", 4, true).value().empty());

  EXPECT_EQ(ReadTextContent(Json("hi"), "c").value(), "hi");
  EXPECT_EQ(ReadTextContent(
                Json::parse(R"([{"type":"text","text":"a"},{"type":"text","text":"b"}])"), "c")
                .value(),
            "a\nb");
  auto image = ReadTextContent(Json::parse(R"([{"type":"image_url","image_url":{}}])"), "c");
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().code(), ErrorCode::kUnsupported);
  EXPECT_FALSE(ReadTextContent(Json(5), "c").ok());
  EXPECT_FALSE(ReadTextContent(Json::parse(R"([{"type":"text"}])"), "c").ok());
  EXPECT_FALSE(ReadTextContent(Json::parse(R"(["a"])"), "c").ok());
}

TEST(RequestFields, RejectIfRequested) {
  const Json body = Json::parse(
      R"({"t0": [], "t1": [{}], "b0": false, "b1": true, "s0": "", "s1": "x", "n0": 0, "n1": 2,
          "o0": {}, "o1": {"a": 1}, "nul": null})");
  for (const char* ok : {"t0", "b0", "s0", "n0", "o0", "nul", "absent"}) {
    EXPECT_TRUE(RejectIfRequested(body, ok).ok()) << ok;
  }
  for (const char* bad : {"t1", "b1", "s1", "n1", "o1"}) {
    EXPECT_EQ(RejectIfRequested(body, bad).code(), ErrorCode::kUnsupported) << bad;
  }
}

TEST(RequestFields, OnDivergeAndItsReport) {
  EXPECT_EQ(ReadOnDiverge(Json::object()).value(), OnDiverge::kFork);
  EXPECT_EQ(ReadOnDiverge(Json{{"on_diverge", "fork"}}).value(), OnDiverge::kFork);
  EXPECT_EQ(ReadOnDiverge(Json{{"on_diverge", "replace"}}).value(), OnDiverge::kReplace);
  EXPECT_EQ(ReadOnDiverge(Json{{"on_diverge", "reject"}}).value(), OnDiverge::kReject);
  for (const Json& bad : {Json("Fork"), Json(""), Json(1)}) {
    const Result<OnDiverge> r = ReadOnDiverge(Json{{"on_diverge", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("on_diverge"), std::string::npos);
  }
  EXPECT_TRUE(DivergenceJson({}).is_null());
  EXPECT_EQ(DivergenceHeaderValue({}), "");
  const Divergence d{.diverged = true, .action = OnDiverge::kFork, .checkpoint = "ckpt-3",
                     .restored = "ckpt-1", .held_tokens = 9};
  EXPECT_EQ(DivergenceJson(d), Json::parse(R"({"diverged": true, "action": "fork",
                                               "checkpoint": "ckpt-3", "restored": "ckpt-1"})"));
  EXPECT_EQ(DivergenceHeaderValue(d), "fork; checkpoint=ckpt-3; restored=ckpt-1");
  EXPECT_EQ(DivergenceHeaderValue({.diverged = true, .action = OnDiverge::kReplace}), "replace");
}

TEST(ApiError, OneMappingFromStatusToHttp) {
  struct Case {
    ErrorCode code;
    int openai, anthropic;
    const char* anthropic_type;
  };
  const Case cases[] = {
      {ErrorCode::kInvalidArgument, 400, 400, "invalid_request_error"},
      {ErrorCode::kOutOfRange, 400, 400, "invalid_request_error"},
      {ErrorCode::kUnsupported, 400, 400, "invalid_request_error"},
      {ErrorCode::kUnauthenticated, 401, 401, "authentication_error"},
      {ErrorCode::kNotFound, 404, 404, "not_found_error"},
      {ErrorCode::kFailedPrecondition, 409, 409, "invalid_request_error"},
      {ErrorCode::kResourceExhausted, 503, 529, "overloaded_error"},
      {ErrorCode::kUnavailable, 503, 529, "overloaded_error"},
      {ErrorCode::kIo, 500, 500, "api_error"},
      {ErrorCode::kCorrupt, 500, 500, "api_error"},
      {ErrorCode::kInternal, 500, 500, "api_error"},
  };
  for (const Case& c : cases) {
    const ApiError e = ApiErrorFromStatus(Status(c.code, "detail"));
    EXPECT_EQ(HttpStatus(e.kind, Dialect::kOpenAi), c.openai) << ErrorCodeName(c.code);
    EXPECT_EQ(HttpStatus(e.kind, Dialect::kAnthropic), c.anthropic) << ErrorCodeName(c.code);
    const Json a = Json::parse(ErrorBody(e, Dialect::kAnthropic));
    EXPECT_EQ(a["type"], "error");
    EXPECT_EQ(a["error"]["type"], c.anthropic_type);
    const Json o = Json::parse(ErrorBody(e, Dialect::kOpenAi));
    EXPECT_TRUE(o["error"]["message"].is_string());
    EXPECT_TRUE(o["error"]["type"].is_string());
    EXPECT_TRUE(o["error"].contains("param"));
    EXPECT_TRUE(o["error"].contains("code"));
    // Server faults keep their detail (paths, store layout) out of the reply.
    const bool internal = c.openai == 500;
    EXPECT_EQ(e.message == "detail", !internal) << ErrorCodeName(c.code);
  }
  EXPECT_EQ(ApiErrorKindFromHttpStatus(413), ApiErrorKind::kRequestTooLarge);
  EXPECT_EQ(ApiErrorKindFromHttpStatus(414), ApiErrorKind::kInvalidRequest);
  EXPECT_EQ(ApiErrorKindFromHttpStatus(404), ApiErrorKind::kNotFound);
  EXPECT_EQ(HttpStatus(ApiErrorKind::kRequestTooLarge, Dialect::kAnthropic), 413);
  EXPECT_EQ(ApiErrorKindFromHttpStatus(403), ApiErrorKind::kPermission);
  const Json forbidden =
      Json::parse(ErrorBody({ApiErrorKind::kPermission, "no"}, Dialect::kAnthropic));
  EXPECT_EQ(forbidden["error"]["type"], "permission_error");
}

// OpenAI's `param` is the field a client error names; `code` tells a prompt past the context.
TEST(ApiError, ParamAndCode) {
  const Json field = Json::parse(ErrorBody(
      ApiErrorFromStatus(FieldError("messages[0].role", "must be ...")), Dialect::kOpenAi));
  EXPECT_EQ(field["error"]["param"], "messages[0].role");
  EXPECT_TRUE(field["error"]["code"].is_null());
  const Json type = Json::parse(ErrorBody(
      ApiErrorFromStatus(TypeError("max_tokens", "an integer", Json("x"))), Dialect::kOpenAi));
  EXPECT_EQ(type["error"]["param"], "max_tokens");
  const Json plain = Json::parse(ErrorBody(
      ApiErrorFromStatus(InvalidArgument("request body is not valid JSON")), Dialect::kOpenAi));
  EXPECT_TRUE(plain["error"]["param"].is_null());
  const ApiError ctx = ApiErrorFromStatus(OutOfRange("the prompt has 9000 tokens; ..."));
  EXPECT_EQ(ctx.kind, ApiErrorKind::kContextLength);
  const Json o = Json::parse(ErrorBody(ctx, Dialect::kOpenAi));
  EXPECT_EQ(o["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(HttpStatus(ctx.kind, Dialect::kOpenAi), 400);
}

}  // namespace
}  // namespace kvmem::serve
