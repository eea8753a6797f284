// kvmem's own endpoints over the agents' persisted memory, in OpenAI's list/object style:
//   GET    /v1/agents        {"object":"list","data":[agent…]}
//   GET    /v1/agents/{id}   {"id","object":"agent","tenant","cached_tokens","bytes","tier",
//                             "kv_format","memory_mode","last_used_at"}
//   DELETE /v1/agents/{id}   {"id","object":"agent.deleted","deleted":true}
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "serve/api_types.h"

namespace kvmem::serve {

std::string AgentJson(const AgentInfo& agent);
// Sorted by id, so listings are stable whatever order the backend keeps.
std::string AgentListJson(std::vector<AgentInfo> agents);
std::string AgentDeletedJson(const std::string& id);

}  // namespace kvmem::serve
