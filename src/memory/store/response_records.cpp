// The Responses API's records beside the agents (agent_store.h): one object
// "<keyed hash of tenant/id>.json" per stored response, in the tenant's "responses" space
// (locally <model dir>/responses/).
#include <mutex>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"

namespace kvmem::memory::store {
namespace {

constexpr std::string_view kResponsesDir = "responses";

Space ResponsesSpace(const AgentKey& key) { return {key.tenant, std::string(kResponsesDir)}; }

std::string RecordName(const AgentKey& key, const NameSecret& secret) {
  return AgentDirName(key, secret) + ".json";
}

Status NoRecord(const AgentKey& key) { return NotFound("no stored response " + AgentLabel(key)); }

}  // namespace

Status AgentStore::SaveResponse(const AgentKey& key, std::string_view json) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::span<const uint8_t> pieces[] = {
      {reinterpret_cast<const uint8_t*>(json.data()), json.size()}};
  return state_->store()
      .Put(ResponsesSpace(key), RecordName(key, state_->name_secret), pieces, {})
      .WithContext("saving response " + AgentLabel(key));
}

Result<std::string> AgentStore::LoadResponse(const AgentKey& key) const {
  if (!ValidateAgentKey(key).ok()) return NoRecord(key);
  std::vector<uint8_t> bytes;
  Status read = ReadObject(state_->store(), ResponsesSpace(key),
                           RecordName(key, state_->name_secret), kMaxManifestBytes, &bytes);
  if (read.code() == ErrorCode::kNotFound) return NoRecord(key);
  KVMEM_RETURN_IF_ERROR(read);
  return std::string(bytes.begin(), bytes.end());
}

Status AgentStore::DeleteResponse(const AgentKey& key) {
  if (!ValidateAgentKey(key).ok()) return NoRecord(key);
  Status st = state_->store().Remove(ResponsesSpace(key), RecordName(key, state_->name_secret), {});
  if (st.code() == ErrorCode::kNotFound) return NoRecord(key);
  return st;
}

}  // namespace kvmem::memory::store
