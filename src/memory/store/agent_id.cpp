#include "memory/store/agent_id.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>

#include "core/utf8.h"
#include "memory/store/hash.h"

namespace kvmem::memory::store {
namespace {

bool TenantChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

// C0 controls and DEL are single bytes; C1 controls (U+0080-U+009F) are 0xC2 0x80-0x9F.
bool IsControlAt(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x20 || b == 0x7F) return true;
  return b == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

}  // namespace

Status ValidateTenant(std::string_view tenant) {
  if (tenant.empty()) return InvalidArgument("tenant is empty");
  if (tenant.size() > kMaxTenantLen) {
    return InvalidArgument("tenant " + Quoted(tenant) + " is " + std::to_string(tenant.size()) +
                           " characters long; at most " + std::to_string(kMaxTenantLen) +
                           " are allowed");
  }
  for (char c : tenant) {
    if (!TenantChar(c)) {
      return InvalidArgument("tenant " + Quoted(tenant) + " contains " + Quoted(std::string(1, c)) +
                             "; only letters, digits, '_', '.' and '-' are allowed");
    }
  }
  if (tenant.find_first_not_of('.') == std::string_view::npos) {
    return InvalidArgument("tenant " + Quoted(tenant) + " is made of dots only");
  }
  return Status::Ok();
}

Status ValidateAgentId(std::string_view id) {
  if (id.empty()) return InvalidArgument("agent id is empty");
  if (id.size() > kMaxAgentIdBytes) {
    return InvalidArgument("agent id " + Quoted(id) + " is " + std::to_string(id.size()) +
                           " bytes long; at most " + std::to_string(kMaxAgentIdBytes) +
                           " are allowed");
  }
  if (const size_t bad = FindInvalidUtf8(id); bad != std::string_view::npos) {
    return InvalidArgument("agent id " + Quoted(id) + " is not valid UTF-8 (byte " +
                           std::to_string(bad) + ")");
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (IsControlAt(id, i)) {
      return InvalidArgument("agent id " + Quoted(id) + " contains a control character at byte " +
                             std::to_string(i));
    }
  }
  return Status::Ok();
}

Status ValidateAgentKey(const AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(ValidateTenant(key.tenant));
  return ValidateAgentId(key.id);
}

std::string AgentDirName(const AgentKey& key, const NameSecret& secret) {
  const std::string joined = key.tenant + "/" + key.id;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  // HMAC-SHA256 fails only when OpenSSL cannot allocate; a name must never come out of that.
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), mac,
           &mac_len) == nullptr ||
      mac_len < kXxh128HexLen / 2) {
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kXxh128HexLen, '0');  // 128 of the 256 bits: the width of every store name
  for (size_t i = 0; i < kXxh128HexLen / 2; ++i) {
    out[2 * i] = kHex[mac[i] >> 4];
    out[2 * i + 1] = kHex[mac[i] & 15];
  }
  return out;
}

std::string LegacyAgentDirName(const AgentKey& key) { return Xxh128Hex(key.tenant + "/" + key.id); }

}  // namespace kvmem::memory::store
