// Internal to agent_store*.cpp: the shared state behind an AgentStore and the helpers its
// operations share. Not part of the public API; thread-safety as stated in agent_store.h.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "memory/store/agent_store.h"
#include "memory/store/manifest.h"
#include "memory/store/store_backend.h"

namespace kvmem::memory::store {

// A manifest larger than this is refused unread (~1M tokens of ids and text fit well within).
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;

struct AgentStore::State {
  StoreOptions options;
  std::unique_ptr<StoreBackend> backend;
  std::string model_dir;     // the local directory, or the shared backend's description
  NameSecret name_secret{};  // agent_id.h: keys the agent space names
  std::mutex mu;             // guards agent_locks and leases
  std::map<std::string, std::shared_ptr<std::mutex>> agent_locks;
  std::map<std::string, std::string> leases;  // space name -> fence of the lease held (Lease)

  std::shared_ptr<std::mutex> AgentLock(const std::string& dir_name);
  std::string DirName(const AgentKey& key) const { return AgentDirName(key, name_secret); }
  Space AgentSpace(const AgentKey& key) const { return {key.tenant, DirName(key)}; }
  StoreBackend& store() const { return *backend; }
  // A local store's recovery after a crash (agent_store.h), and the move of spaces not under
  // their keyed name.
  Status RecoverLocal();
  // The fence for a mutation of the agent's space: the lease this process holds on it (Lease),
  // else, on a shared backend, one taken for the mutation alone (released by the FenceHold).
  class FenceHold;
};

class AgentStore::State::FenceHold {
 public:
  static Result<FenceHold> Take(State& s, const Space& space);
  FenceHold(FenceHold&& o) noexcept
      : s_(std::exchange(o.s_, nullptr)),
        space_(std::move(o.space_)),
        token_(std::move(o.token_)) {}
  FenceHold& operator=(FenceHold&&) = delete;
  ~FenceHold();
  const std::string& token() const { return token_; }

 private:
  FenceHold(State* owned_by, Space space, std::string token)
      : s_(owned_by), space_(std::move(space)), token_(std::move(token)) {}
  State* s_;  // set when the lease is this hold's own, to release
  Space space_;
  std::string token_;
};

// "tenant/id" for messages.
std::string AgentLabel(const AgentKey& key);

// Reads and parses the space's manifest, or the checkpoint `file` (NotFound if there is none).
Result<AgentManifest> ReadManifest(const StoreBackend& store, const Space& space,
                                   std::string_view file = kManifestName);
// The object whole (up to max_bytes: Corrupt beyond).
Status ReadObject(const StoreBackend& store, const Space& space, std::string_view name,
                  uint64_t max_bytes, std::vector<uint8_t>* out);

// "ckpt-<n>.json" of a checkpoint id, and the checkpoint files of dir by increasing n.
std::string CheckpointFile(std::string_view id);
std::vector<std::string> CheckpointIds(const std::vector<std::string>& dir_names);

// True for names Save writes as block files ("kv-<32 hex>.safetensors").
bool IsBlockFileName(std::string_view name);

// Removes block files of the space that neither `keep` nor one of its checkpoints names;
// returns how many were removed (none while a checkpoint cannot be read: its blocks are
// unknown).
int RemoveUnreferencedBlocks(StoreBackend& store, const Space& space,
                             const std::vector<BlockEntry>& keep, std::string_view fence);

}  // namespace kvmem::memory::store
