// The Backend the server runs in production: requests become turns of memory::AgentRuntime
// (per-agent KV caches, hot in RAM and persisted in the AgentStore). Chat requests are rendered
// with the model's chat template; completions use the raw prompt. Sampling settings the client
// leaves unset take llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
// Thread-safe (AgentRuntime is).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/grammar/token_table.h"
#include "memory/agents/agent_runtime.h"
#include "serve/backend.h"
#include "tokenizer/chat_template.h"

namespace kvmem::serve {

class EngineBackend : public Backend {
 public:
  // runtime must outlive the backend. model_name is what responses report; embedding_model
  // names the runtime's sentence encoder (AgentRuntimeOptions::encoder), if it has one.
  EngineBackend(memory::AgentRuntime* runtime, const tokenizer::Tokenizer& tok,
                std::string model_name, std::string embedding_model = "");

  Result<GenerationResult> Generate(const GenerationRequest& request,
                                    GenerationSink* sink) override;
  Result<AgentInfo> CreateAgent(const std::string& tenant,
                                const AgentCreateRequest& request) override;
  Result<std::vector<AgentInfo>> ListAgents(const std::string& tenant) override;
  Result<AgentInfo> GetAgent(const std::string& tenant, const std::string& id) override;
  Status DeleteAgent(const std::string& tenant, const std::string& id) override;
  Result<nlohmann::json> RebuildAgent(const std::string& tenant, const std::string& id) override;
  Result<nlohmann::json> AgentSegments(const std::string& tenant, const std::string& id,
                                       const memory::SegmentRequest& request) override;
  Result<memory::AgentMemoryView> InspectAgent(const std::string& tenant,
                                               const std::string& id) override;
  Result<std::vector<memory::TurnRecord>> AgentTurns(const std::string& tenant,
                                                     const std::string& id) override;
  // In the runtime's AgentStore (responses/ of its model directory); in RAM without a store.
  Status PutResponse(const std::string& tenant, const std::string& id,
                     const nlohmann::json& record) override;
  Result<nlohmann::json> GetResponse(const std::string& tenant, const std::string& id) override;
  Status DeleteResponse(const std::string& tenant, const std::string& id) override;
  std::vector<TokenPiece> Tokenize(std::string_view text, bool add_special,
                                   bool parse_special) const override;
  Result<std::string> Detokenize(std::span<const int32_t> ids) const override;
  Result<int64_t> CountPromptTokens(const GenerationRequest& request) const override;
  Result<Embeddings> Embed(std::span<const std::string> texts) const override;
  ModelInfo model() const override { return model_; }
  nlohmann::ordered_json Policies() const override;
  BackendStats stats() const override;

  // The prompt text of a request: the chat template applied to its messages (opening the
  // assistant's turn, or continuing a final assistant message), or the raw completion prompt.
  Result<std::string> RenderPrompt(const GenerationRequest& request) const;
  // The prompt of a request to an agent with a server-side conversation: `conversation` (what
  // the agent holds) continued with the request's messages, or its raw completion prompt
  // appended; the whole request rendered when the agent holds nothing yet.
  Result<std::string> ContinuePrompt(const GenerationRequest& request,
                                     std::string_view conversation) const;

 private:
  memory::AgentRuntime* runtime_;
  const tokenizer::Tokenizer& tok_;
  // Constrained decoding: the tokenizer's token table, built on the first request with a grammar.
  const engine::grammar::TokenTable& token_table() const;
  mutable std::once_flag token_table_once_;
  mutable std::unique_ptr<engine::grammar::TokenTable> token_table_;
  // The Responses records of a runtime without a store, keyed "tenant/id" (under responses_mu_).
  std::mutex responses_mu_;
  std::map<std::string, nlohmann::json> responses_;
  std::optional<tokenizer::ChatTemplate> template_;
  Status template_status_;
  ModelInfo model_;
};

// Shared with `kvmem chat` and `kvmem inspect`: the K/V format as the agents API shows it.
std::string KvFormatLabel(const kv::KvFormats& f);

}  // namespace kvmem::serve
