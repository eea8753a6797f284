// What a scenario run needs from a kvmem server: agents created, deleted, and talked to. The
// runner (runner.h) is written against this; http_client.h is the implementation over kvmem's
// HTTP API, and tests use fakes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "nlohmann/json.hpp"

namespace kvmem::scenario {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatReply {
  std::string text;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, read from the agent's KV cache
  double ttft_ms = 0;         // request sent to first reply text received
};

struct AgentOpened {
  bool existed = false;       // the agent was already there (a permanent agent resuming)
  int64_t cached_tokens = 0;  // what its memory holds
};

class ScenarioClient {
 public:
  virtual ~ScenarioClient() = default;
  // Creates the agent (`memory`: the agents API's object, or null for the server's default) or,
  // when it exists, reports so. server_conversation: the server keeps the conversation and each
  // chat sends only what is new; otherwise each chat sends the whole conversation.
  virtual Result<AgentOpened> OpenAgent(const std::string& id, const nlohmann::json& memory,
                                        bool server_conversation) = 0;
  // Deletes the agent; an agent that does not exist is not an error.
  virtual Status DeleteAgent(const std::string& id) = 0;
  // One turn of the agent: `messages` as the agent's conversation mode wants them.
  virtual Result<ChatReply> Chat(const std::string& id, const std::vector<ChatMessage>& messages,
                                 int max_tokens, double temperature) = 0;
};

}  // namespace kvmem::scenario
