// What the memory inspector (GET /v1/agents/{id}/memory and /turns, serve/inspector_api.h)
// reads of an agent through AgentRuntime: its memory between turns and its last turns. Plain
// data; no policy is named here, each policy says what its parts are (MemoryPolicy::Inspect).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kvmem::memory {

// An agent's memory as it is between turns, for the inspector (GET /v1/agents/{id}/memory).
struct AgentMemoryView {
  std::string policy;
  std::string text;       // the conversation the memory holds (MemoryPolicy::text())
  int64_t rows = 0;       // KV rows it holds
  nlohmann::json memory;  // MemoryPolicy::Inspect(): cached byte ranges of text, the policy's parts
};

// One of the last turns an agent ran while this runtime lived (GET /v1/agents/{id}/turns).
struct TurnRecord {
  int64_t turn = 0;  // 1 for the first turn this runtime ran for the agent
  int64_t at_unix_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  nlohmann::json report;  // MemoryPolicy::Report()
  nlohmann::json detail;  // MemoryPolicy::Detail(): what the turn read, in full
};

// Turns an agent's record keeps (the oldest go first): recall detail is large (per layer or per
// KV head), so only the last few.
inline constexpr size_t kRecentTurns = 8;

}  // namespace kvmem::memory
