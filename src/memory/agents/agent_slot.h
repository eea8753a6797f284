// AgentRuntime's record of one agent (internal to memory/agents).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "kv/kv_pool.h"
#include "memory/agents/agent_runtime.h"

namespace kvmem::memory {

// One agent. `pool` and `policy` belong to the turn holding the ticket; eviction touches them
// only under `mu` while no ticket is out. The atomics are for readers that must not wait for a
// turn (List, stats), as are `spec` and `last_turn`, which are written and read under `mu`.
struct AgentRuntime::Slot {
  store::AgentKey key;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_ticket = 0;
  uint64_t serving = 0;

  // How the resident memory got here, reported by the next turn: kWarm when it was loaded from
  // the store (e.g. by ConversationText) and no turn has used it yet.
  Tier arrival = Tier::kMiss;
  MemorySpec spec;  // chosen at creation or read from the store
  bool has_spec = false;
  std::unique_ptr<kv::KvPool> pool;
  std::unique_ptr<MemoryPolicy> policy;  // over `pool`
  Json last_turn;                        // policy->Report() after the last turn
  // The last turns (bounded by kRecentTurns), kept when the memory leaves RAM; under `mu`.
  std::deque<TurnRecord> recent_turns;
  int64_t turns_run = 0;
  bool created = false;                  // by CreateAgent: listed before its first turn
  int64_t store_version = -1;            // the store's Version of the agent that `policy` holds

  std::atomic<bool> resident{false};
  std::atomic<int64_t> hot_bytes{0};
  std::atomic<int64_t> n_tokens{0};
  std::atomic<int64_t> last_use_ms{0};

  void Drop() {
    policy.reset();
    pool.reset();
    last_turn = nullptr;
    resident = false;
    hot_bytes = 0;
  }
  void LockedDrop() {
    std::lock_guard<std::mutex> l(mu);
    Drop();
  }
};

}  // namespace kvmem::memory
