// The Responses API's records beside the agents (agent_store.h): <model dir>/responses/, one
// "<keyed hash of tenant/id>.json" per stored response.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "memory/store/agent_store.h"
#include "memory/store/agent_store_state.h"
#include "memory/store/atomic_file.h"

namespace kvmem::memory::store {
namespace {

constexpr std::string_view kResponsesDir = "responses";

std::string ResponsesDir(const std::string& model_dir) {
  return model_dir + "/" + std::string(kResponsesDir);
}

std::string RecordName(const AgentKey& key, const NameSecret& secret) {
  return AgentDirName(key, secret) + ".json";
}

Status NoRecord(const AgentKey& key) { return NotFound("no stored response " + AgentLabel(key)); }

}  // namespace

Status RecoverResponses(const std::string& model_dir) {
  const std::string dir = ResponsesDir(model_dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::Ok();  // none saved yet
  if (!S_ISDIR(st.st_mode)) return IoError("'" + dir + "' is not a directory");
  return RemoveLeftoverTemps(dir).status();
}

Status AgentStore::SaveResponse(const AgentKey& key, std::string_view json) {
  KVMEM_RETURN_IF_ERROR(ValidateAgentKey(key));
  const std::string dir = ResponsesDir(state_->model_dir);
  KVMEM_RETURN_IF_ERROR(MakeDir(dir));
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(json.data()), json.size());
  return WriteFileAtomic(dir, RecordName(key, state_->name_secret), bytes)
      .WithContext("saving response " + AgentLabel(key));
}

Result<std::string> AgentStore::LoadResponse(const AgentKey& key) const {
  if (!ValidateAgentKey(key).ok()) return NoRecord(key);
  std::vector<uint8_t> bytes;
  Status read = ReadFileNoFollow(ResponsesDir(state_->model_dir),
                                 RecordName(key, state_->name_secret), kMaxManifestBytes, &bytes);
  if (read.code() == ErrorCode::kNotFound) return NoRecord(key);
  KVMEM_RETURN_IF_ERROR(read);
  return std::string(bytes.begin(), bytes.end());
}

Status AgentStore::DeleteResponse(const AgentKey& key) {
  if (!ValidateAgentKey(key).ok()) return NoRecord(key);
  const std::string dir = ResponsesDir(state_->model_dir);
  const std::string path = dir + "/" + RecordName(key, state_->name_secret);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NoRecord(key);
    return IoError("delete '" + path + "': " + std::strerror(errno));
  }
  return SyncDir(dir);
}

}  // namespace kvmem::memory::store
