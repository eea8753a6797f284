// The memory inspector's JSON endpoints: what the /ui page shows of an agent, a plain API that
// curl reads as well (tenant-scoped like the agents API; {id} percent-encoded, agent_path.h):
//
//   GET /v1/agents/{id}/memory  {"id", "object": "agent.memory", "policy", "rows",
//                                "text":   the conversation the memory holds, as rendered
//                                "cached": [begin, end, ...] byte ranges of text whose tokens
//                                          have KV rows a next turn can read
//                                "parts":  the policy's own units in order, each {"kind",
//                                          "bytes": [begin, end], ...} (MemoryPolicy::Inspect),
//                                "note":   when the policy adds one, what "cached" means there}
//   GET /v1/agents/{id}/turns   {"id", "object": "list", "data": [{"object": "agent.turn",
//                                "turn", "created_ms", "prompt_tokens", "cached_tokens",
//                                "report": the turn's last_turn, "detail": what it read in full
//                                (per layer or KV head; null when it read every row)}]}:
//                                the last turns since the server started, oldest first
//
// Byte ranges index the UTF-8 bytes of "text" (a token may end inside a character).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "memory/agents/inspection.h"

namespace kvmem::serve {

std::string AgentMemoryJson(const std::string& id, const memory::AgentMemoryView& memory);
std::string AgentTurnsJson(const std::string& id, const std::vector<memory::TurnRecord>& turns);

}  // namespace kvmem::serve
