// The agent a /v1/agents/{id}[/rebuild|/memory|/turns|/segments[/{name}]] path names. An id may
// hold any character a client uses ('/', '@', spaces, non-ASCII: memory/store/agent_id.h), sent
// percent-encoded, so the id is read from the request target as sent and decoded once, after the
// path is split: "/v1/agents/a%2Fb" names the id "a/b" and "/v1/agents/a%2Frebuild" the id
// "a/rebuild", never the rebuild route of "a". (The HTTP library decodes the path before routing,
// which would make those two the same.) Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::serve {

// What under the agent a path names: the agent, POST .../rebuild, the inspector's GET
// .../memory and .../turns (inspector_api.h), GET .../segments or PUT|DELETE
// .../segments/{name} (agents_api.h).
enum class AgentResource { kAgent, kRebuild, kMemory, kTurns, kSegments, kSegment };

struct AgentPath {
  std::string id = {};  // decoded and validated (ValidateAgentId)
  AgentResource resource = AgentResource::kAgent;
  std::string segment = {};  // kSegment: decoded and validated (memory::ValidateSegmentName)
};

// target: the request target as received ("/v1/agents/alice%40example.com?x=1"; the query is
// ignored). NotFound when the path is none of these forms; InvalidArgument (naming "path") for a
// bad percent escape, an invalid id or an invalid segment name.
Result<AgentPath> ParseAgentPath(std::string_view target);

// RFC 3986 percent-decoding ('+' stays '+', as in any path). InvalidArgument for '%' not followed
// by two hex digits.
Result<std::string> PercentDecode(std::string_view s);

}  // namespace kvmem::serve
