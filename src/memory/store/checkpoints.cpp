// AgentStore's checkpoints: earlier manifests of an agent kept beside its current one.
#include <algorithm>
#include <set>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"

namespace kvmem::memory::store {
namespace {

constexpr std::string_view kCheckpointPrefix = "ckpt-";
constexpr std::string_view kCheckpointSuffix = ".json";

int64_t CheckpointNumber(std::string_view id) { return std::stoll(std::string(id.substr(5))); }

}  // namespace

bool IsCheckpointId(std::string_view id) {
  if (!id.starts_with(kCheckpointPrefix)) return false;
  const std::string_view n = id.substr(kCheckpointPrefix.size());
  if (n.empty() || n.size() > 18 || n.front() == '0') return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string CheckpointFile(std::string_view id) {
  return std::string(id) + std::string(kCheckpointSuffix);
}

std::vector<std::string> CheckpointIds(const std::vector<std::string>& dir_names) {
  std::vector<std::string> ids;
  for (const std::string& n : dir_names) {
    if (!n.ends_with(kCheckpointSuffix)) continue;
    const std::string id = n.substr(0, n.size() - kCheckpointSuffix.size());
    if (IsCheckpointId(id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return CheckpointNumber(a) < CheckpointNumber(b);
  });
  return ids;
}

Result<CheckpointInfo> AgentStore::Checkpoint(const AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string where = "checkpointing agent " + AgentLabel(key);
  const Space space = state_->AgentSpace(key);
  StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_ASSIGN_OR_RETURN(State::FenceHold fence, State::FenceHold::Take(*state_, space));
  std::vector<uint8_t> bytes;
  Status read = ReadObject(store, space, kManifestName, kMaxManifestBytes, &bytes);
  if (read.code() == ErrorCode::kNotFound) return NotFound(where + ": no stored cache");
  KVMEM_RETURN_IF_ERROR(read.WithContext(where));
  KVMEM_ASSIGN_OR_RETURN(
      AgentManifest m,
      ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()}));
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, store.List(space));
  const std::vector<std::string> ids = CheckpointIds(names);
  CheckpointInfo info;
  info.id = std::string(kCheckpointPrefix) +
            std::to_string(ids.empty() ? 1 : CheckpointNumber(ids.back()) + 1);
  const std::span<const uint8_t> pieces[] = {bytes};
  KVMEM_RETURN_IF_ERROR(
      store.Put(space, CheckpointFile(info.id), pieces, fence.token()).WithContext(where));
  info.n_tokens = static_cast<int64_t>(m.tokens.size());
  info.last_use_unix_ms = m.last_use_unix_ms;
  info.bytes_on_disk = bytes.size();
  for (const BlockEntry& b : m.blocks) info.bytes_on_disk += b.bytes;
  return info;
}

Result<int> AgentStore::TrimCheckpoints(const AgentKey& key, int max_keep, std::string_view spare) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const Space space = state_->AgentSpace(key);
  StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  Result<std::vector<std::string>> names = store.List(space);
  if (!names.ok()) {
    if (names.status().code() == ErrorCode::kNotFound) return 0;
    return names.status();
  }
  std::vector<std::string> ids = CheckpointIds(*names);
  const bool spared = std::erase(ids, std::string(spare)) > 0;
  size_t count = ids.size() + (spared ? 1 : 0);
  const size_t keep = static_cast<size_t>(std::max(max_keep, 0));
  if (count <= keep) return 0;
  KVMEM_ASSIGN_OR_RETURN(State::FenceHold fence, State::FenceHold::Take(*state_, space));
  int deleted = 0;
  for (size_t i = 0; i < ids.size() && count > keep; ++i, --count) {
    Status st = store.Remove(space, CheckpointFile(ids[i]), fence.token());
    if (!st.ok() && st.code() != ErrorCode::kNotFound) {
      return st.WithContext("agent " + AgentLabel(key));
    }
    ++deleted;
  }
  return deleted;
}

Result<std::vector<CheckpointInfo>> AgentStore::ListCheckpoints(const AgentKey& key,
                                                                bool with_text) const {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const Space space = state_->AgentSpace(key);
  const StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  std::vector<CheckpointInfo> out;
  Result<std::vector<std::string>> names = store.List(space);
  if (!names.ok()) {
    if (names.status().code() == ErrorCode::kNotFound) return out;
    return names.status();
  }
  for (const std::string& id : CheckpointIds(*names)) {
    Result<AgentManifest> m = ReadManifest(store, space, CheckpointFile(id));
    if (!m.ok() || !(m->key == key)) continue;
    CheckpointInfo c;
    c.id = id;
    c.n_tokens = static_cast<int64_t>(m->tokens.size());
    c.last_use_unix_ms = m->last_use_unix_ms;
    const Result<uint64_t> size = store.Size(space, CheckpointFile(id));
    c.bytes_on_disk = size.ok() ? *size : 0;
    for (const BlockEntry& b : m->blocks) c.bytes_on_disk += b.bytes;
    if (with_text) c.text = std::move(m->text);
    out.push_back(std::move(c));
  }
  return out;
}

Status AgentStore::DeleteCheckpoint(const AgentKey& key, std::string_view id) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string where = "agent " + AgentLabel(key) + " checkpoint '" + std::string(id) + "'";
  if (!IsCheckpointId(id)) return InvalidArgument(where + ": not a checkpoint id");
  const Space space = state_->AgentSpace(key);
  StoreBackend& store = state_->store();
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(space.name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  KVMEM_ASSIGN_OR_RETURN(State::FenceHold fence, State::FenceHold::Take(*state_, space));
  Status removed = store.Remove(space, CheckpointFile(id), fence.token());
  if (removed.code() == ErrorCode::kNotFound) return NotFound(where + ": none");
  KVMEM_RETURN_IF_ERROR(removed.WithContext(where));
  Result<AgentManifest> m = ReadManifest(store, space);
  if (m.ok()) RemoveUnreferencedBlocks(store, space, m->blocks, fence.token());
  return Status::Ok();
}

}  // namespace kvmem::memory::store
