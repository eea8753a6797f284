// Who an agent is, and where its files live. An agent is named by (tenant, id); both are
// untrusted (they arrive in HTTP requests), so they are validated here and never used as path
// components: an agent's directory is the XXH3-128 of tenant + '/' + id in hex, so no id can
// reach outside the store ("..", "a/b", absolute paths, NUL bytes), collide with another
// tenant's agent by spelling, or leak its name through a directory listing. '/' cannot occur in
// either name, so the joined string is unambiguous. Thread-safe: values and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::memory::store {

inline constexpr size_t kMaxAgentNameLen = 64;

struct AgentKey {
  std::string tenant;
  std::string id;
  bool operator==(const AgentKey&) const = default;
};

// `what` names the field in the message ("agent id", "tenant"). InvalidArgument unless name
// matches [A-Za-z0-9_.-]{1,64} and is not made of dots only ("." ".." "...").
Status ValidateAgentName(std::string_view what, std::string_view name);
Status ValidateAgentKey(const AgentKey& key);

// The agent's directory name (32 hex characters). Requires ValidateAgentKey(key).ok().
std::string AgentDirName(const AgentKey& key);

}  // namespace kvmem::memory::store
