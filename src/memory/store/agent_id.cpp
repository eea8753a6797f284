#include "memory/store/agent_id.h"

#include "memory/store/hash.h"
#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

bool AllowedChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

}  // namespace

Status ValidateAgentName(std::string_view what, std::string_view name) {
  const std::string w(what);
  if (name.empty()) return InvalidArgument(w + " is empty");
  if (name.size() > kMaxAgentNameLen) {
    return InvalidArgument(w + " " + Quoted(name) + " is " + std::to_string(name.size()) +
                           " characters long; at most " + std::to_string(kMaxAgentNameLen) +
                           " are allowed");
  }
  for (char c : name) {
    if (!AllowedChar(c)) {
      return InvalidArgument(w + " " + Quoted(name) + " contains " + Quoted(std::string(1, c)) +
                             "; only letters, digits, '_', '.' and '-' are allowed");
    }
  }
  if (name.find_first_not_of('.') == std::string_view::npos) {
    return InvalidArgument(w + " " + Quoted(name) + " is made of dots only");
  }
  return Status::Ok();
}

Status ValidateAgentKey(const AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentName("tenant", key.tenant));
  return ValidateAgentName("agent id", key.id);
}

std::string AgentDirName(const AgentKey& key) { return Xxh128Hex(key.tenant + "/" + key.id); }

}  // namespace kvmem::memory::store
