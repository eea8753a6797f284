// The agent store on Redis (or Valkey), shared by several kvmem servers: `--store
// redis://HOST:PORT/DB`. Keys, for a model's fingerprint F (32 hex):
//
//   kvmem:F::name-secret                  the root space's objects
//   kvmem:F:spaces                        set of "tenant:name" of every space
//   kvmem:F:<tenant>:<name>               set of the space's object names
//   kvmem:F:<tenant>:<name>:<object>      an object's bytes (the local store's file bytes:
//                                         manifests, safetensors blocks with their checksums)
//   kvmem:F:<tenant>:<name>#version       advanced by every Publish and RemoveSpace
//   kvmem:F:<tenant>:<name>#lease         "<n>:<random>", the holder's fence (SET NX PX)
//   kvmem:F:<tenant>:<name>#fence         the counter n of leases granted
//
// Tenants are [A-Za-z0-9_.-] and names are hex or "responses", so a key is unambiguous: no key
// of one tenant (or model) can name another's. Every mutation is one Lua script that first
// checks the fence against the lease key, so it applies whole or not at all, and never after
// its lease passed to another server. Leases expire after lease_ttl unless renewed; a thread
// renews the ones this process holds every lease_ttl / 3. Block objects (kv-*.safetensors,
// immutable: named by their content's hash) are kept in a read-through cache: RAM (cache_bytes),
// then a local directory (cache_dir, disk_cache.h), so a server reads each from Redis once, and
// once more only when both have let it go.
//
// Every call has a timeout (connect and each command); a call that fails drops its connection
// and returns IoError naming the server, and the next call connects again.
// Durability is Redis's: run it with appendonly yes, appendfsync always for an acknowledged
// turn to survive a crash of Redis itself (the tests do). Standalone Redis only: the scripts
// touch keys they do not declare (not Redis Cluster).
// Thread-safety: as StoreBackend (a pool of connections, one per call in flight).
#pragma once

#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory/store/disk_cache.h"
#include "memory/store/store_backend.h"

struct redisContext;

namespace kvmem::memory::store {

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::chrono::milliseconds timeout{2000};     // connect, and each command
  std::chrono::milliseconds lease_ttl{10000};  // a holder that stops renewing loses it after this
  size_t cache_bytes = size_t{256} << 20;      // the read-through cache of block objects
  std::string cache_dir{};                     // its local-directory tier; none when empty
  uint64_t cache_dir_bytes = uint64_t{4} << 30;
};

// "redis://HOST[:PORT][/DB]" (PORT default 6379, DB default 0); InvalidArgument otherwise.
Result<RedisOptions> ParseRedisUrl(std::string_view url);
bool IsRedisUrl(std::string_view s);

class RedisBackend final : public StoreBackend {
 public:
  // Connects once (Unavailable when the server cannot be reached) and starts the lease renewer.
  static Result<std::unique_ptr<RedisBackend>> Open(RedisOptions options,
                                                    std::string model_fingerprint);
  ~RedisBackend() override;

  bool shared() const override { return true; }
  std::string Describe() const override;
  std::string Where(const Space& space, std::string_view name) const override;

  Status Put(const Space& space, std::string_view name, Pieces pieces,
             std::string_view fence) override;
  Result<int64_t> Publish(const Space& space, std::string_view name, std::span<const uint8_t> bytes,
                          std::string_view fence) override;
  Result<bool> PutIfAbsent(const Space& space, std::string_view name,
                           std::span<const uint8_t> bytes) override;
  Result<std::unique_ptr<Blob>> Open(const Space& space, std::string_view name) const override;
  Result<uint64_t> Size(const Space& space, std::string_view name) const override;
  Status Remove(const Space& space, std::string_view name, std::string_view fence) override;
  Result<std::vector<std::string>> List(const Space& space) const override;
  Result<std::vector<Space>> Spaces() const override;
  Status RemoveSpace(const Space& space, std::string_view fence) override;
  Result<int64_t> Version(const Space& space) const override;
  Result<std::string> AcquireLease(const Space& space, std::chrono::milliseconds wait) override;
  void ReleaseLease(const Space& space, std::string_view token) override;

  // Block reads served from RAM, from the cache directory, and from Redis (tests, metrics).
  int64_t cache_hits() const;
  int64_t disk_hits() const;
  int64_t cache_misses() const;

 private:
  class Connection;
  struct Reply;
  RedisBackend(RedisOptions options, std::string prefix, std::unique_ptr<DiskCache> disk);

  Result<std::unique_ptr<Connection>> Connect() const;
  // Runs one command on a pooled connection.
  Result<Reply> Command(const std::vector<std::string_view>& args) const;
  std::string SpaceKey(const Space& space) const;
  std::string ObjectKey(const Space& space, std::string_view name) const;
  Result<int64_t> Write(const Space& space, std::string_view name, std::string_view bytes,
                        std::string_view fence, bool publish);
  void RenewLoop();
  // Drops the key from the block cache, both tiers (written or removed by this process; block
  // names otherwise always mean the same bytes, on any server).
  void Forget(const std::string& key) const;
  // Adds a block read from a lower tier to the RAM cache.
  void Remember(const std::string& key, std::shared_ptr<const std::string> bytes) const;

  RedisOptions options_;
  std::string prefix_;  // "kvmem:F:"
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Connection>> idle_;

  // The block cache: LRU of full keys.
  struct Cached {
    std::shared_ptr<const std::string> bytes;
    std::list<std::string>::iterator lru;
  };
  mutable std::mutex cache_mu_;
  mutable std::list<std::string> lru_;  // most recent first
  mutable std::unordered_map<std::string, Cached> cache_;
  mutable size_t cache_used_ = 0;
  mutable int64_t hits_ = 0, disk_hits_ = 0, misses_ = 0;
  std::unique_ptr<DiskCache> disk_;  // null without cache_dir

  std::mutex lease_mu_;
  std::condition_variable lease_cv_;
  std::map<std::string, std::string> held_;  // lease key -> token
  bool stopping_ = false;
  std::thread renewer_;
};

}  // namespace kvmem::memory::store
