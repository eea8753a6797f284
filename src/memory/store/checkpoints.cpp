// AgentStore's checkpoints: earlier manifests of an agent kept beside its current one.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"
#include "memory/store/atomic_file.h"

namespace kvmem::memory::store {
namespace {

constexpr std::string_view kCheckpointPrefix = "ckpt-";
constexpr std::string_view kCheckpointSuffix = ".json";

int64_t CheckpointNumber(std::string_view id) { return std::stoll(std::string(id.substr(5))); }

uint64_t FileBytes(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size)
                                                                : 0;
}

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
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  std::vector<uint8_t> bytes;
  Status read = ReadFileNoFollow(dir, kManifestName, kMaxManifestBytes, &bytes, state_->fs());
  if (read.code() == ErrorCode::kNotFound) return NotFound(where + ": no stored cache");
  KVMEM_RETURN_IF_ERROR(read.WithContext(where));
  KVMEM_ASSIGN_OR_RETURN(
      AgentManifest m,
      ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()}));
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir, state_->fs()));
  const std::vector<std::string> ids = CheckpointIds(names);
  CheckpointInfo info;
  info.id = std::string(kCheckpointPrefix) +
            std::to_string(ids.empty() ? 1 : CheckpointNumber(ids.back()) + 1);
  KVMEM_RETURN_IF_ERROR(
      WriteFileAtomic(dir, CheckpointFile(info.id), bytes, state_->fs()).WithContext(where));
  info.n_tokens = static_cast<int64_t>(m.tokens.size());
  info.last_use_unix_ms = m.last_use_unix_ms;
  info.bytes_on_disk = bytes.size();
  for (const BlockEntry& b : m.blocks) info.bytes_on_disk += b.bytes;
  return info;
}

Result<int> AgentStore::TrimCheckpoints(const AgentKey& key, int max_keep, std::string_view spare) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  Result<std::vector<std::string>> names = ListDir(dir, state_->fs());
  if (!names.ok()) {
    if (names.status().code() == ErrorCode::kNotFound) return 0;
    return names.status();
  }
  std::vector<std::string> ids = CheckpointIds(*names);
  const bool spared = std::erase(ids, std::string(spare)) > 0;
  size_t count = ids.size() + (spared ? 1 : 0);
  int deleted = 0;
  for (size_t i = 0; i < ids.size() && count > static_cast<size_t>(std::max(max_keep, 0));
       ++i, --count) {
    const std::string path = dir + "/" + CheckpointFile(ids[i]);
    if (state_->fs().Unlink(path.c_str()) != 0 && errno != ENOENT) {
      return IoError("agent " + AgentLabel(key) + ": delete '" + path + "': " +
                     std::strerror(errno));
    }
    ++deleted;
  }
  if (deleted > 0) KVMEM_RETURN_IF_ERROR(SyncDir(dir, state_->fs()));
  return deleted;
}

Result<std::vector<CheckpointInfo>> AgentStore::ListCheckpoints(const AgentKey& key,
                                                                bool with_text) const {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  std::vector<CheckpointInfo> out;
  Result<std::vector<std::string>> names = ListDir(dir, state_->fs());
  if (!names.ok()) {
    if (names.status().code() == ErrorCode::kNotFound) return out;
    return names.status();
  }
  for (const std::string& id : CheckpointIds(*names)) {
    Result<AgentManifest> m = ReadManifest(state_->fs(), dir, CheckpointFile(id));
    if (!m.ok() || !(m->key == key)) continue;
    CheckpointInfo c;
    c.id = id;
    c.n_tokens = static_cast<int64_t>(m->tokens.size());
    c.last_use_unix_ms = m->last_use_unix_ms;
    c.bytes_on_disk = FileBytes(dir + "/" + CheckpointFile(id));
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
  const std::string dir_name = state_->DirName(key);
  const std::string dir = state_->AgentDir(dir_name);
  std::shared_ptr<std::mutex> agent_mu = state_->AgentLock(dir_name);
  std::lock_guard<std::mutex> agent_lock(*agent_mu);
  const std::string path = dir + "/" + CheckpointFile(id);
  if (state_->fs().Unlink(path.c_str()) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(where + ": none");
    return IoError(where + ": delete: " + std::strerror(errno));
  }
  KVMEM_RETURN_IF_ERROR(SyncDir(dir, state_->fs()));
  Result<AgentManifest> m = ReadManifest(state_->fs(), dir);
  if (m.ok()) RemoveUnreferencedBlocks(state_->fs(), dir, m->blocks);
  return Status::Ok();
}

}  // namespace kvmem::memory::store
