// kvmem's own endpoints over the agents' persisted memory, in OpenAI's list/object style:
//   POST   /v1/agents        {"id", "memory": {"policy": NAME, "config": {...}}} → agent; the
//                             shape before policies, {"id", "memory": "full" | "retrieval",
//                             "retrieval": {settings}}, is read as policy and config too
//   GET    /v1/agents        {"object":"list","data":[agent…]}
//   GET    /v1/agents/{id}   {"id","object":"agent","tenant","cached_tokens","bytes","tier",
//                             "kv_format","memory": {"policy", "config"},"last_used_at",
//                             "last_turn": the policy's report of its latest turn, or null}
//   DELETE /v1/agents/{id}   {"id","object":"agent.deleted","deleted":true}
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/api_types.h"

namespace kvmem::serve {

// The POST body's shape; InvalidArgument naming the field. The policy's config is the
// backend's to validate (a misspelt setting is refused there, never silently ignored).
Result<AgentCreateRequest> ParseAgentCreateRequest(std::string_view body);

std::string AgentJson(const AgentInfo& agent);
// Sorted by id, so listings are stable whatever order the backend keeps.
std::string AgentListJson(std::vector<AgentInfo> agents);
std::string AgentDeletedJson(const std::string& id);

}  // namespace kvmem::serve
