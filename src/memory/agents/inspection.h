// What the memory inspector (GET /v1/agents/{id}/memory and /turns, serve/inspector_api.h)
// reads of an agent through AgentRuntime: its memory between turns and its last turns. Plain
// data; no policy is named here, each policy says what its parts are (MemoryPolicy::Inspect).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "memory/agents/tier.h"

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
  Tier tier = Tier::kMiss;  // where the memory came from
  double load_ms = 0;       // reading it from the store (a warm turn)
  nlohmann::json report;  // MemoryPolicy::Report()
  // MemoryPolicy::Detail(): what the turn read, in full; {"omitted": why} when it holds more
  // than kMaxDetailValues values (per layer and KV head lists of a long history).
  nlohmann::json detail;
};

// Turns an agent's record keeps (the oldest go first): recall detail is large (per layer or per
// KV head), so only the last few.
inline constexpr size_t kRecentTurns = 8;
// Values (numbers, strings) a kept detail may hold: 32K, about 0.5 MiB in RAM, so an agent's
// record stays within a few MiB whatever its policy reads.
inline constexpr size_t kMaxDetailValues = size_t{1} << 15;

}  // namespace kvmem::memory
