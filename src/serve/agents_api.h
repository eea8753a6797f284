// kvmem's own endpoints over the agents' persisted memory, in OpenAI's list/object style:
//   POST   /v1/agents        {"id", "memory": {"policy": NAME, "config": {...}}} → agent; the
//                             shape before policies, {"id", "memory": "full" | "retrieval",
//                             "retrieval": {settings}}, is read as policy and config too
//   GET    /v1/agents        {"object":"list","data":[agent…]}
//   GET    /v1/agents/{id}   {"id","object":"agent","tenant","cached_tokens","bytes","tier",
//                             "kv_format","memory": {"policy", "config"},"last_used_at",
//                             "last_turn": the policy's report of its latest turn, or null}
//   DELETE /v1/agents/{id}   {"id","object":"agent.deleted","deleted":true}
// and the segments of an agent whose memory is named segments (memory/policy/segments.h):
//   GET    /v1/agents/{id}/segments         {"object":"list","data":[segment…]}, memory order
//   PUT    /v1/agents/{id}/segments/{name}  {"text": "..."} → segment: {"object":
//                                           "agent.segment","name","text","group","static",
//                                           "tokens"} (group -1 until grouped)
//   DELETE /v1/agents/{id}/segments/{name}  {"object":"agent.segment.deleted","name",
//                                           "deleted":true}
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
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

// The PUT body's text; InvalidArgument naming the field (unknown fields refused).
Result<std::string> ParseSegmentPutRequest(std::string_view body);
// What the backend's AgentSegments returned, as the API answers it.
std::string SegmentJson(const nlohmann::json& segment);
std::string SegmentListJson(const nlohmann::json& segments);
std::string SegmentDeletedJson(const std::string& name);

}  // namespace kvmem::serve
