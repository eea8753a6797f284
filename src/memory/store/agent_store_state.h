// Internal to agent_store*.cpp: the shared state behind an AgentStore and the helpers its
// operations share. Not part of the public API; thread-safety as stated in agent_store.h.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "memory/store/agent_store.h"
#include "memory/store/manifest.h"

namespace kvmem::memory::store {

// A manifest larger than this is refused unread (~1M tokens of ids and text fit well within).
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;

struct AgentStore::State {
  StoreOptions options;
  std::string model_dir;
  int lock_fd = -1;
  NameSecret name_secret{};  // agent_id.h: keys the agent directory names
  std::mutex mu;  // guards agent_locks
  std::map<std::string, std::shared_ptr<std::mutex>> agent_locks;

  ~State();
  std::shared_ptr<std::mutex> AgentLock(const std::string& dir_name);
  std::string AgentDir(const std::string& dir_name) const { return model_dir + "/" + dir_name; }
  std::string DirName(const AgentKey& key) const { return AgentDirName(key, name_secret); }
  FileOps& fs() const { return *options.file_ops; }
};

// "tenant/id" for messages.
std::string AgentLabel(const AgentKey& key);

// Reads and parses dir's manifest, or the checkpoint `file` (NotFound if there is none).
Result<AgentManifest> ReadManifest(FileOps& fs, const std::string& dir,
                                   std::string_view file = kManifestName);

// "ckpt-<n>.json" of a checkpoint id, and the checkpoint files of dir by increasing n.
std::string CheckpointFile(std::string_view id);
std::vector<std::string> CheckpointIds(const std::vector<std::string>& dir_names);

// True for names Save writes as block files ("kv-<32 hex>.safetensors").
bool IsBlockFileName(std::string_view name);

// Open's part for the Responses records: removes the temp files a crashed save left in
// <model_dir>/responses (agent_store.h), if that directory exists.
Status RecoverResponses(const std::string& model_dir);

// Removes block files of dir that neither `keep` nor one of dir's checkpoints names; returns
// how many were removed (none while a checkpoint cannot be read: its blocks are unknown).
int RemoveUnreferencedBlocks(FileOps& fs, const std::string& dir,
                             const std::vector<BlockEntry>& keep);

}  // namespace kvmem::memory::store
