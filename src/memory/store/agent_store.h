// Persistent per-agent KV caches (DESIGN.md "Persistence format"; semantic.md's per-agent
// caches that reload instead of re-prefilling), kept by a backend (store_backend.h): a local
// directory (the default, one process) or Redis (`redis://HOST:PORT/DB` as the root: several
// servers share the agents, redis_backend.h). Each agent is a space of objects; on disk, under
// the root:
//
//   <root>/<first 16 hex of the model fingerprint>/   one directory per model
//     .lock                                           held (flock) by the process that opened it
//     name-secret                                     32 random bytes keying the agent dir names
//     <agent dir: keyed hash of tenant/id, agent_id.h>/
//       manifest.json                                 manifest.h: written last, atomically
//       kv-<xxh3-128>.safetensors                     block_file.h: immutable, content-addressed
//       ckpt-<n>.json                                 checkpoints: earlier manifests, kept
//     responses/<keyed hash of tenant/id>.json        the server's stored Responses API
//                                                     responses (SaveResponse), atomic
//
// Save writes only blocks whose bytes are not already on disk (full blocks of earlier turns are
// reused by name; the trailing partial block gets a new name when it changes, so a manifest
// never names a rewritten file), then the manifest (the acknowledgement), then removes the
// files no manifest names (the agent's own or a checkpoint's).
//
// Checkpoints keep a conversation a request diverged from (AgentRuntime's on_diverge "fork"): a
// copy of the manifest as it was, under ckpt-<n>.json, naming the same immutable block files,
// so a checkpoint costs a manifest plus the blocks the conversations do not share. A crash at any
// point leaves the previous manifest and every file it names intact; Open removes what a crash left
// behind (temp files, unreferenced blocks, directories without a manifest) and moves an agent
// directory whose name is not its keyed name (stores written before the keyed hash named
// directories by XXH3-128 of tenant/id) to that name.
//
// Load verifies before it uses anything: the manifest's schema and types, that it belongs to
// the key, the model fingerprint, KV formats and geometry equal to the live pool's, token ids
// below n_vocab, block counts and rows adding up to the tokens, and per block its size,
// checksum, safetensors framing, metadata and tensor shapes. Any failure is a Status naming the
// problem and leaves the sequence empty.
//
// What is persisted of a sequence: its rows in storage order with their rotated positions and
// which sliding-window layers were released. Load rebuilds the plain view (every row read at
// its rotated position); views a policy customized (hidden or killed rows, per-head lists) are
// the policy's to re-apply.
//
// Thread-safety: an AgentStore may be shared by threads. Operations on one agent are
// serialized by a per-agent mutex; different agents proceed in parallel. Save reads, and Load
// writes, the KvPool of the sequence: the caller keeps other writers of those blocks (Save) or
// of the pool (Load: it allocates) away meanwhile, as KvPool requires. One process per model
// directory: Open fails with Unavailable while another process holds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/kv_format.h"
#include "kv/kv_sequence.h"
#include "memory/store/agent_id.h"
#include "memory/store/file_ops.h"
#include "memory/store/manifest.h"

namespace kvmem::memory::store {

struct StoreOptions {
  std::string root;               // DefaultStoreRoot() unless the user chose one
  std::string model_fingerprint;  // ModelFingerprint() of the loaded GGUF
  int32_t n_vocab = 0;            // stored token ids must be below it
  // The store's file-system calls go through it (file_ops.h); tests inject faults here. Not
  // routed: creating the root itself, the lock's flock, close, and lstat of sizes (whose
  // failure reads as "no such block": Save then writes it). Not owned: it outlives the store.
  FileOps* file_ops = &RealFileOps();
  // A shared backend: how long a mutation or a Lease waits for another server's lease.
  std::chrono::milliseconds lease_wait{15000};
  // A Redis root: each command's timeout, the lease's time to live, the block cache's size in
  // RAM, its local directory (none when empty) and that directory's size.
  std::chrono::milliseconds redis_timeout{2000};
  std::chrono::milliseconds lease_ttl{10000};
  size_t cache_bytes = size_t{256} << 20;
  std::string cache_dir{};
  uint64_t cache_dir_bytes = uint64_t{4} << 30;
};

// $XDG_DATA_HOME/kvmem when XDG_DATA_HOME is an absolute path, else $HOME/.local/share/kvmem.
Result<std::string> DefaultStoreRoot();
// The local directory of a Redis store's block cache: $XDG_CACHE_HOME/kvmem/store-cache, else
// $HOME/.cache/kvmem/store-cache.
Result<std::string> DefaultStoreCacheDir();

struct SaveStats {
  int blocks_written = 0;      // new block files
  int blocks_reused = 0;       // already on disk under their content name
  uint64_t bytes_written = 0;  // block files and manifest
  int files_removed = 0;       // unreferenced block files garbage-collected
  int64_t version = 0;         // the agent's version after the save (Version)
};

struct AgentRecord {
  std::vector<int32_t> tokens;  // one per loaded row
  std::string text;             // the rendered prompt the tokens came from
  int64_t last_use_unix_ms = 0;
  int blocks = 0;
  uint64_t bytes_read = 0;
  MemoryRecord memory;  // how the rows serve the agent's turns
  int64_t version = 0;  // the agent's Version when it was read
};

struct AgentInfo {
  AgentKey key;
  int64_t n_tokens = 0;
  uint64_t bytes_on_disk = 0;  // manifest and block files
  kv::KvFormats formats;
  int64_t last_use_unix_ms = 0;
  MemoryRecord memory;  // as stored, without its state
  Status status;  // not ok when the manifest could not be read (key and counts then unknown)
};

// A checkpoint of an agent's conversation (Checkpoint).
struct CheckpointInfo {
  std::string id;  // "ckpt-<n>", n increasing per agent
  int64_t n_tokens = 0;
  int64_t last_use_unix_ms = 0;  // of the conversation it holds: its last turn
  uint64_t bytes_on_disk = 0;    // its manifest and the blocks it names (shared ones included)
  std::string text;              // the rendered conversation (ListCheckpoints with_text)
};

// True for "ckpt-<n>" with n of 1..18 decimal digits without leading zeros.
bool IsCheckpointId(std::string_view id);

class AgentStore;

// The agent's lease while it lives (AgentStore::Lease); released by the destructor.
class AgentLease {
 public:
  AgentLease(AgentLease&& o) noexcept;
  AgentLease& operator=(AgentLease&&) = delete;
  ~AgentLease();

 private:
  friend class AgentStore;
  AgentLease(AgentStore* store, AgentKey key) : store_(store), key_(std::move(key)) {}
  AgentStore* store_;
  AgentKey key_;
};

class AgentStore {
 public:
  // A local root: creates <root>/<fingerprint prefix>/ if missing, takes its lock and cleans up
  // after crashes. A Redis root: connects (Unavailable when it cannot).
  static Result<AgentStore> Open(StoreOptions options);

  AgentStore(AgentStore&&) noexcept;
  AgentStore& operator=(AgentStore&&) noexcept;
  ~AgentStore();

  // Persists seq's rows. tokens (seq.n_rows()) are the ids of the rows in storage order; text is
  // the rendered prompt they came from. token_text_ends, when given (one per token: the byte
  // offset in text where the token's text ends), records each block's text span. The sequence's
  // blocks must not be written during the call. memory is recorded in the manifest.
  Result<SaveStats> Save(const AgentKey& key, const kv::KvSequence& seq,
                         std::span<const int32_t> tokens, std::string_view text,
                         std::span<const size_t> token_text_ends = {},
                         const MemoryRecord& memory = {});

  // Loads the agent into seq, which must be empty and use a pool of the stored formats and
  // geometry: its current conversation, or the checkpoint named. NotFound if the agent has no
  // cache (or no such checkpoint). On any error seq is left empty.
  Status Load(const AgentKey& key, kv::KvSequence* seq, AgentRecord* out,
              std::string_view checkpoint = {});

  // Keeps the agent's stored conversation (its manifest as it is now) as a new checkpoint.
  // NotFound if the agent has no cache.
  Result<CheckpointInfo> Checkpoint(const AgentKey& key);
  // Deletes the oldest checkpoints beyond max_keep (>= 0), sparing `spare` (one just used);
  // their blocks go with the next save's collection. How many it deleted.
  Result<int> TrimCheckpoints(const AgentKey& key, int max_keep, std::string_view spare = {});
  // The agent's checkpoints, oldest first (none for an agent without a cache). Unreadable
  // checkpoint files are left out (and kept, with their blocks, for a person to see).
  Result<std::vector<CheckpointInfo>> ListCheckpoints(const AgentKey& key, bool with_text) const;
  // NotFound if the agent has no such checkpoint.
  Status DeleteCheckpoint(const AgentKey& key, std::string_view id);

  // The memory record in the agent's manifest, without reading its blocks. NotFound if the
  // agent has no cache; the manifest's own errors otherwise.
  Result<MemoryRecord> ReadMemory(const AgentKey& key) const;

  // Every agent of this model, sorted by tenant then id (unreadable ones last).
  Result<std::vector<AgentInfo>> List() const;

  // Removes the agent's manifest (durably first: the agent is gone even if a crash follows) and
  // files. NotFound if it has none.
  Status Delete(const AgentKey& key);

  // True if the agent has a manifest (false for invalid keys, and when the backend cannot be
  // reached).
  bool Contains(const AgentKey& key) const;

  // True when other servers share the store (Lease and Version matter).
  bool shared() const;
  // Holds the agent's lease until the AgentLease goes: this process is its one writer. Waits up
  // to lease_wait while another server holds it, then Unavailable; IoError when the backend
  // cannot be reached. At once on a local store. One Lease per agent at a time in a process.
  Result<AgentLease> Lease(const AgentKey& key);
  // The agent's version: advanced by every save and delete, by any server.
  Result<int64_t> Version(const AgentKey& key) const;

  // Records of the server's Responses API (serve/responses_api.h), one small JSON document per
  // (tenant, response id), opaque here: the key (validated like an agent's) is named by its
  // keyed hash, so no client string reaches the file system. Open cleans the directory's temp
  // files and leaves the records alone. SaveResponse replaces atomically and durably;
  // LoadResponse and DeleteResponse: NotFound when there is none.
  Status SaveResponse(const AgentKey& key, std::string_view json);
  Result<std::string> LoadResponse(const AgentKey& key) const;
  Status DeleteResponse(const AgentKey& key);

  // The model's directory (a local store) or the backend's description.
  const std::string& model_dir() const;
  // The agent's directory (a local store), or where its objects are. Requires
  // ValidateAgentKey(key).ok().
  std::string AgentDir(const AgentKey& key) const;

 private:
  friend class AgentLease;
  struct State;
  explicit AgentStore(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvmem::memory::store
