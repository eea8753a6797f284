// ScenarioClient over kvmem's HTTP API: the agents API for agents, streamed OpenAI chat
// completions (the agent in `user`) for turns, so TTFT is the time to the first streamed text.
// Thread-safe: each call opens its own connection.
#pragma once

#include <string>

#include "scenario/scenario_client.h"

namespace kvmem::scenario {

class HttpScenarioClient : public ScenarioClient {
 public:
  // base_url: "http://HOST:PORT"; api_key: sent as a bearer token when not empty.
  static Result<HttpScenarioClient> Create(const std::string& base_url, std::string api_key);

  Result<AgentOpened> OpenAgent(const std::string& id, const nlohmann::json& memory,
                                bool server_conversation) override;
  Status DeleteAgent(const std::string& id) override;
  Result<ChatReply> Chat(const std::string& id, const std::vector<ChatMessage>& messages,
                         int max_tokens, double temperature) override;

 private:
  HttpScenarioClient(std::string base_url, std::string api_key)
      : base_url_(std::move(base_url)), api_key_(std::move(api_key)) {}

  std::string base_url_;
  std::string api_key_;
};

// "/v1/agents/" + the id percent-encoded (every byte outside A-Z a-z 0-9 - _ . ~).
std::string AgentPath(const std::string& id);

}  // namespace kvmem::scenario
