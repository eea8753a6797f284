// libFuzzer target for the HTTP request bodies of every endpoint that takes one, parsed as the
// server parses them (no server): POST /v1/chat/completions, /v1/completions, /v1/responses
// (OpenAI), /v1/messages (Anthropic) and /v1/agents. The input is a body; each parser gets it,
// under two request contexts (no X-Agent-Id header, generic tools, an 8K context; a header agent,
// Llama 3.1 tools, a 512-token context). Accepted requests are checked for what the backend relies
// on: a reply writer, exactly one of messages and prompt, a token budget inside the context,
// and a grammar (response_format, tools, the "grammar" extension) that a matcher can run.
// /v1/responses reads the previous response from a backend holding one stored record
// ("resp_fuzz", a conversation with a tool call) and names its own agent (no header check).
// An accepted agent body's policy config goes through the policy table as the backend's
// CreateAgent does, and the config it returns must load again from the manifest it is saved
// in (memory::SpecFromRecord). See fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/grammar/matcher.h"
#include "memory/policy/policy_table.h"
#include "serve/agent_path.h"
#include "serve/agents_api.h"
#include "serve/anthropic_api.h"
#include "serve/openai_api.h"
#include "serve/responses_api.h"

namespace kvmem::fuzz {
namespace {

using serve::ParsedRequest;
using serve::RequestContext;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

RequestContext Context(bool agent_header) {
  RequestContext ctx;
  ctx.tenant = "fuzz";
  ctx.model.name = "fuzz-model";
  if (agent_header) {
    ctx.header_agent_id = "agent-1";
    ctx.model.context_length = 512;
    ctx.model.tool_format = serve::ToolFormat::kLlama31;
  } else {
    ctx.model.context_length = 8192;
  }
  return ctx;
}

// A Backend that holds one stored response and nothing else.
class OneRecordBackend : public serve::Backend {
 public:
  Result<serve::GenerationResult> Generate(const serve::GenerationRequest&,
                                           serve::GenerationSink*) override {
    return Unsupported("fuzz");
  }
  Result<serve::AgentInfo> CreateAgent(const std::string&,
                                       const serve::AgentCreateRequest&) override {
    return Unsupported("fuzz");
  }
  Result<std::vector<serve::AgentInfo>> ListAgents(const std::string&) override {
    return Unsupported("fuzz");
  }
  Result<serve::AgentInfo> GetAgent(const std::string&, const std::string&) override {
    return Unsupported("fuzz");
  }
  Status DeleteAgent(const std::string&, const std::string&) override {
    return Unsupported("fuzz");
  }
  Result<nlohmann::json> RebuildAgent(const std::string&, const std::string&) override {
    return Unsupported("fuzz");
  }
  Result<nlohmann::json> AgentSegments(const std::string&, const std::string&,
                                       const memory::SegmentRequest&) override {
    return Unsupported("fuzz");
  }
  Result<memory::AgentMemoryView> InspectAgent(const std::string&, const std::string&) override {
    return Unsupported("fuzz");
  }
  Result<std::vector<memory::TurnRecord>> AgentTurns(const std::string&,
                                                     const std::string&) override {
    return Unsupported("fuzz");
  }
  Status PutResponse(const std::string&, const std::string&, const nlohmann::json&) override {
    return Status::Ok();
  }
  Result<nlohmann::json> GetResponse(const std::string&, const std::string& id) override {
    if (id != "resp_fuzz") return NotFound("no stored response");
    return nlohmann::json::parse(R"({"response": {}, "agent": "resp_fuzz", "messages": [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
         "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        {"role": "assistant", "content": "3"}]})");
  }
  Status DeleteResponse(const std::string&, const std::string&) override { return Status::Ok(); }
  std::vector<serve::TokenPiece> Tokenize(std::string_view, bool, bool) const override {
    return {};
  }
  Result<std::string> Detokenize(std::span<const int32_t>) const override {
    return Unsupported("fuzz");
  }
  Result<int64_t> CountPromptTokens(const serve::GenerationRequest&) const override {
    return Unsupported("fuzz");
  }
  Result<serve::Embeddings> Embed(std::span<const std::string>) const override {
    return Unsupported("fuzz");
  }
  nlohmann::ordered_json Policies() const override { return {}; }
  serve::ModelInfo model() const override { return {}; }
  serve::BackendStats stats() const override { return {}; }
};

void CheckRequest(const Result<ParsedRequest>& r, const RequestContext& ctx,
                  bool header_names_agent = true) {
  if (!r.ok()) {
    Check(!r.status().message().empty());
    return;
  }
  const serve::GenerationRequest& g = r->generation;
  Check(r->reply != nullptr);
  Check(g.messages.empty() == g.prompt.has_value());
  Check(!g.max_tokens || (*g.max_tokens >= 0 && *g.max_tokens <= ctx.model.context_length));
  Check(g.n >= 1);
  if (ctx.header_agent_id && header_names_agent) {
    Check(g.agent.id.empty() || g.agent.id == *ctx.header_agent_id);
  }
  if (g.grammar) {
    engine::grammar::Matcher m(g.grammar);
    (void)m.IsComplete();
    (void)m.CanContinue();
    for (std::string_view piece : {"{", "\"", " ", "a", "1", "}", "<", "\xc3\xa9"}) {
      (void)m.AcceptBytes(piece);
    }
  }
}

void CheckAgentCreate(std::string_view body) {
  Result<serve::AgentCreateRequest> r = serve::ParseAgentCreateRequest(body);
  if (!r.ok()) {
    Check(!r.status().message().empty());
    return;
  }
  static const memory::PolicyEnv env;
  Result<memory::MemorySpec> spec =
      memory::ParseMemorySpec(env, r->policy.empty() ? "full" : r->policy, r->config);
  if (!spec.ok()) {
    Check(!spec.status().message().empty());
    return;
  }
  Result<memory::MemorySpec> stored =
      memory::SpecFromRecord(env, memory::RecordOf(*spec, memory::Json::object()));
  Check(stored.ok() && stored->kind == spec->kind && stored->config == spec->config);
}

// A segment PUT body, and the bytes as an agent path's segment name: what is accepted is a
// valid segment.
void CheckSegment(std::string_view body) {
  Result<std::string> text = serve::ParseSegmentPutRequest(body);
  if (text.ok()) {
    Check(memory::ValidateSegmentText(*text).ok());
  } else {
    Check(!text.status().message().empty());
  }
  Result<serve::AgentPath> path =
      serve::ParseAgentPath("/v1/agents/a/segments/" + std::string(body));
  if (path.ok()) {
    Check(path->resource == serve::AgentResource::kSegment &&
          memory::ValidateSegmentName(path->segment).ok());
  }
}

}  // namespace
}  // namespace kvmem::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmem::fuzz;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  static const kvmem::serve::RequestContext contexts[] = {Context(false), Context(true)};
  for (const kvmem::serve::RequestContext& ctx : contexts) {
    CheckRequest(kvmem::serve::ParseChatCompletionRequest(body, ctx), ctx);
    CheckRequest(kvmem::serve::ParseCompletionRequest(body, ctx), ctx);
    CheckRequest(kvmem::serve::ParseMessagesRequest(body, ctx), ctx);
    static OneRecordBackend backend;
    CheckRequest(kvmem::serve::ParseResponsesRequest(body, ctx, backend), ctx,
                 /*header_names_agent=*/false);
  }
  CheckAgentCreate(body);
  CheckSegment(body);
  return 0;
}
