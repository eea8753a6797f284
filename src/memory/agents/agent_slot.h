// AgentRuntime's record of one agent (internal to memory/agents): shared by agent_runtime.cpp
// and agent_retrieval_turn.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "memory/agents/agent_runtime.h"

namespace kvmem::memory {

// One agent. The cache fields (pool, seq, tokens, text) belong to the turn holding the ticket;
// eviction touches them only under `mu` while no ticket is out. The atomics are for readers
// that must not wait for a turn (List, stats), as are `memory` and `last_turn`, which are
// written and read under `mu`.
struct AgentRuntime::Slot {
  store::AgentKey key;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_ticket = 0;
  uint64_t serving = 0;

  // How the resident cache got here, reported by the next turn: kWarm when it was loaded from
  // the store (e.g. by ConversationText) and no turn has used it yet.
  Tier arrival = Tier::kMiss;
  std::unique_ptr<kv::KvPool> pool;
  std::unique_ptr<kv::KvSequence> seq;
  std::vector<int32_t> tokens;  // ids of seq's rows, in order
  std::string text;             // what those tokens spell (the rendered conversation so far)
  // The mode chosen at creation (or read from the store); retrieval agents keep their rows in
  // `memart` (its history: `tokens`, `text`, and token_ends, the end of each token's text)
  // instead of seq.
  AgentMemory memory;
  std::unique_ptr<MemArtMemory> memart;
  std::vector<size_t> token_ends;
  std::optional<RetrievalTurn> last_turn;
  bool created = false;  // by CreateAgent: listed before its first turn

  std::atomic<bool> resident{false};
  std::atomic<int64_t> hot_bytes{0};
  std::atomic<int64_t> n_tokens{0};
  std::atomic<int64_t> last_use_ms{0};

  void Drop() {
    seq.reset();
    memart.reset();
    pool.reset();
    tokens.clear();
    text.clear();
    token_ends.clear();
    last_turn.reset();
    resident = false;
    hot_bytes = 0;
  }
  void LockedDrop() {
    std::lock_guard<std::mutex> l(mu);
    Drop();
  }
};

}  // namespace kvmem::memory
