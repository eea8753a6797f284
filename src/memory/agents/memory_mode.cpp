#include "memory/agents/memory_mode.h"

namespace kvmem::memory {

const char* MemoryModeName(MemoryMode mode) {
  return mode == MemoryMode::kRetrieval ? "retrieval" : "full";
}

Result<MemoryMode> ParseMemoryMode(std::string_view name) {
  if (name == "full") return MemoryMode::kFull;
  if (name == "retrieval") return MemoryMode::kRetrieval;
  return InvalidArgument("memory mode '" + std::string(name) + "' (full or retrieval)");
}

Status ValidateAgentMemory(const AgentMemory& memory) {
  if (memory.mode == MemoryMode::kFull) return Status::Ok();
  if (memory.retrieval.coupled_positions) {
    return InvalidArgument("retrieval agents read their history at re-encoded positions");
  }
  if (memory.retrieval.top_k < 1 || memory.retrieval.top_k > 4096) {
    return InvalidArgument("retrieval top_k must be in [1, 4096]");
  }
  if (memory.retrieval.keep_first > 65536 || memory.retrieval.keep_last > 65536) {
    return InvalidArgument("retrieval keep_first and keep_last must be at most 65536 tokens");
  }
  if (memory.retrieval.retrieval_heads.size() > 256) {
    return InvalidArgument("retrieval heads: at most 256");
  }
  return ValidateMemArtConfig(memory.retrieval);
}

store::MemoryPolicy ToPolicy(const AgentMemory& memory) {
  store::MemoryPolicy p;
  p.mode = MemoryModeName(memory.mode);
  if (memory.mode == MemoryMode::kRetrieval) {
    const MemArtConfig& c = memory.retrieval;
    p.block_size = c.block_size;
    p.top_k = c.top_k;
    p.strategy = StrategyName(c.strategy);
    p.keep_first = c.keep_first;
    p.keep_last = c.keep_last;
    p.neighbors = c.neighbors;
    p.turn_bounded = c.turn_bounded;
    p.whole_turns = c.whole_turns;
    for (const HeadRef& h : c.retrieval_heads) p.retrieval_heads.push_back(HeadRefName(h));
  }
  return p;
}

Result<AgentMemory> FromPolicy(const store::MemoryPolicy& policy) {
  AgentMemory m;
  auto mode = ParseMemoryMode(policy.mode);
  if (!mode.ok()) return Corrupt("stored " + mode.status().message());
  m.mode = *mode;
  if (m.mode == MemoryMode::kFull) return m;
  auto strategy = ParseStrategy(policy.strategy);
  if (!strategy.ok()) return Corrupt("stored " + strategy.status().message());
  m.retrieval.block_size = policy.block_size;
  m.retrieval.top_k = policy.top_k;
  m.retrieval.strategy = *strategy;
  m.retrieval.keep_first = policy.keep_first;
  m.retrieval.keep_last = policy.keep_last;
  m.retrieval.neighbors = policy.neighbors;
  m.retrieval.turn_bounded = policy.turn_bounded;
  m.retrieval.whole_turns = policy.whole_turns;
  for (const std::string& name : policy.retrieval_heads) {
    auto h = ParseHeadRef(name);
    if (!h.ok()) return Corrupt("stored retrieval head " + h.status().message());
    m.retrieval.retrieval_heads.push_back(*h);
  }
  if (Status st = ValidateAgentMemory(m); !st.ok()) return Corrupt("stored " + st.message());
  return m;
}

}  // namespace kvmem::memory
