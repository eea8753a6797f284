#include "serve/agents_api.h"

#include <algorithm>

#include "serve/json_body.h"

namespace kvmem::serve {
namespace {

Json ToJson(const AgentInfo& a) {
  return {{"id", a.id},
          {"object", "agent"},
          {"tenant", a.tenant},
          {"cached_tokens", a.cached_tokens},
          {"bytes", a.bytes},
          {"tier", CacheTierName(a.tier)},
          {"kv_format", a.kv_format},
          {"memory_mode", a.memory_mode},
          {"last_used_at", a.last_used_unix}};
}

}  // namespace

std::string AgentJson(const AgentInfo& agent) { return DumpJson(ToJson(agent)); }

std::string AgentListJson(std::vector<AgentInfo> agents) {
  std::sort(agents.begin(), agents.end(),
            [](const AgentInfo& a, const AgentInfo& b) { return a.id < b.id; });
  Json data = Json::array();
  for (const AgentInfo& a : agents) data.push_back(ToJson(a));
  return DumpJson({{"object", "list"}, {"data", std::move(data)}});
}

std::string AgentDeletedJson(const std::string& id) {
  return DumpJson({{"id", id}, {"object", "agent.deleted"}, {"deleted", true}});
}

}  // namespace kvmem::serve
