// kvmem's own endpoints over the agents' persisted memory, in OpenAI's list/object style:
//   POST   /v1/agents        {"id", "memory": "full"|"retrieval", "retrieval": {"block_size",
//                             "top_k", "strategy", "keep_first", "keep_last", "neighbors",
//                             "turn_bounded": true|false, "whole_turns": true|false,
//                             "heads": ["7.1", ...]}} → agent
//   GET    /v1/agents        {"object":"list","data":[agent…]}
//   GET    /v1/agents/{id}   {"id","object":"agent","tenant","cached_tokens","bytes","tier",
//                             "kv_format","memory_mode","last_used_at"} and, for a retrieval
//                             agent after a turn, "last_turn": {"history_tokens",
//                             "retrieved_rows","prefill_tokens","kv_len_decode",
//                             "scoring_tokens": [begin, end] (of the prefilled ones),
//                             "blocks":[{"block","first_token","n_tokens","layers","text"}…]}
//   DELETE /v1/agents/{id}   {"id","object":"agent.deleted","deleted":true}
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"

namespace kvmem::serve {

// The POST body; InvalidArgument naming the field (unknown fields under "retrieval" included,
// so a misspelt setting is not silently ignored).
Result<AgentCreateRequest> ParseAgentCreateRequest(std::string_view body);

std::string AgentJson(const AgentInfo& agent);
// Sorted by id, so listings are stable whatever order the backend keeps.
std::string AgentListJson(std::vector<AgentInfo> agents);
std::string AgentDeletedJson(const std::string& id);

}  // namespace kvmem::serve
