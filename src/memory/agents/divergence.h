// A request whose conversation is not the one its agent holds (issue "memory that is never lost
// by accident"): what the client asked to happen to the held conversation, and what happened.
// Shared by memory/agents (AgentRuntime::RunTurn) and the server's API types. Plain values.
#pragma once

#include <cstdint>
#include <string>

namespace kvmem::memory {

// What a turn does to an agent's stored conversation when its prompt diverges from it (does not
// start with all of it: MemoryPolicy::client_conversation; memories that take such a prompt as
// new never diverge): keep it as a checkpoint the agent's store holds
// (fork), let the turn drop it (replace), or refuse the turn and change nothing (reject).
enum class OnDiverge { kFork, kReplace, kReject };
const char* OnDivergeName(OnDiverge d);  // "fork", "replace", "reject"

// What a prompt that diverged from the agent's conversation did to it.
struct Divergence {
  bool diverged = false;
  OnDiverge action = OnDiverge::kFork;  // kFork: kept as `checkpoint`; kReplace: dropped
  std::string checkpoint = {};          // the checkpoint now holding the earlier conversation
  // A checkpoint that shared more of the prompt than the conversation held, which the turn
  // continued instead (a client resending a conversation it had before).
  std::string restored = {};
  int64_t held_tokens = 0;  // tokens of the conversation the prompt diverged from
};

}  // namespace kvmem::memory
