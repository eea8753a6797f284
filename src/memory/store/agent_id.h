// Who an agent is, and where its files live. An agent is named by (tenant, id); both are
// untrusted (they arrive in HTTP requests) and never used as path components.
//
// The id is whatever a client uses to name a user or a conversation: OpenAI's `user`, Anthropic's
// `metadata.user_id`, the X-Agent-Id header. So any UTF-8 string of 1..256 bytes is an id
// (e-mail addresses, spaces, '/', non-ASCII), except control characters, which no client means
// and which would hide an id in logs and `kvmem inspect` tables. The id is kept as sent (the
// "display id") in the agent's manifest and shown by the API. Tenants come from the server's
// own configuration (--api-key KEY:TENANT) and keep the narrow alphabet [A-Za-z0-9_.-]{1,64}.
//
// An agent's directory is named by a keyed hash: the first 128 bits of
// HMAC-SHA256(store secret, tenant '/' id) in hex. '/' cannot occur in a tenant, so the joined
// string is unambiguous; HMAC makes two different keys collide with probability 2^-128 even for
// a client that chooses them, and the secret (random, kept in the store: agent_store.h) keeps a
// directory listing from confirming a guessed id, which a plain hash of the id would.
// Thread-safe: values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvmem::memory::store {

inline constexpr size_t kMaxAgentIdBytes = 256;
inline constexpr size_t kMaxTenantLen = 64;
inline constexpr size_t kNameSecretBytes = 32;

using NameSecret = std::array<uint8_t, kNameSecretBytes>;

struct AgentKey {
  std::string tenant;
  std::string id;
  bool operator==(const AgentKey&) const = default;
};

// InvalidArgument unless tenant matches [A-Za-z0-9_.-]{1,64} and is not made of dots only.
Status ValidateTenant(std::string_view tenant);
// InvalidArgument unless id is 1..kMaxAgentIdBytes bytes of valid UTF-8 without control
// characters (U+0000-U+001F, U+007F-U+009F). Messages start with "agent id".
Status ValidateAgentId(std::string_view id);
Status ValidateAgentKey(const AgentKey& key);

// The agent's directory name: 32 lowercase hex characters. Requires ValidateAgentKey(key).ok().
std::string AgentDirName(const AgentKey& key, const NameSecret& secret);

// The name stores written before the keyed hash gave a directory: XXH3-128 of tenant '/' id.
// AgentStore::Open renames such directories (agent_store.h); nothing else uses it.
std::string LegacyAgentDirName(const AgentKey& key);

}  // namespace kvmem::memory::store
