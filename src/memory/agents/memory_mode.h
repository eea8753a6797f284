// How an agent's KV rows serve its turns:
//   full       the rows are the conversation's KV cache: a turn keeps the prefix the cache
//              shares with the new prompt and prefills the rest (agent_runtime.h). The
//              conversation must fit the context.
//   retrieval  the rows are a MemArt history (memory/retrieval/memart.h): a turn prefills only
//              what its prompt adds to the conversation, reading, in each layer, the top-k
//              history blocks its attention picks, re-placed before it at positions 0..R-1; the
//              turn (prompt and reply) then joins the history. The history may outgrow the
//              context.
// Chosen when an agent is created (POST /v1/agents, kvmem chat --memory) and kept in its
// manifest (store::MemoryPolicy). Thread-safety: values and pure functions.
#pragma once

#include <string_view>

#include "core/status.h"
#include "memory/retrieval/memart.h"
#include "memory/store/manifest.h"

namespace kvmem::memory {

enum class MemoryMode { kFull, kRetrieval };

const char* MemoryModeName(MemoryMode mode);  // "full", "retrieval"
Result<MemoryMode> ParseMemoryMode(std::string_view name);

struct AgentMemory {
  MemoryMode mode = MemoryMode::kFull;
  MemArtConfig retrieval;  // kRetrieval; coupled_positions is never set for agents
};

// InvalidArgument naming the bad setting.
Status ValidateAgentMemory(const AgentMemory& memory);

store::MemoryPolicy ToPolicy(const AgentMemory& memory);
// A stored policy as an agent memory; Corrupt when it is not a valid one.
Result<AgentMemory> FromPolicy(const store::MemoryPolicy& policy);

}  // namespace kvmem::memory
