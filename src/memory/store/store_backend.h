// Where an agent store keeps its bytes, behind one small interface (after LMCache's abstract
// backend): named objects (byte strings) grouped in spaces. A space is one agent's (its
// manifest, block files and checkpoints), a tenant's Responses records, or the store's own (the
// name secret: the root space). Two implementations: a local directory (local_backend.h, the
// default, one process) and Redis (redis_backend.h, shared by several servers).
//
// The contract every backend keeps:
// - Put replaces an object atomically and durably: a reader sees the old bytes or the new,
//   never a mix, and once Put returns ok the bytes survive a crash of this process (for Redis,
//   as far as its persistence settings make writes durable: appendfsync always for all of it).
// - Publish is Put that also advances the space's version: the manifest, written last, so a
//   reader never sees a half-written turn, and a server holding an agent in RAM can tell (by
//   Version) whether another server has written it since.
// - Mutations of an agent's space carry the fence of the lease they are made under: a shared
//   backend refuses them (FailedPrecondition) once that lease is no longer the agent's, so a
//   server that stalled past its lease can neither publish over the next owner's turn nor
//   collect block files the next owner's manifest names. An empty fence is for spaces without
//   leases (the root, Responses records) and for backends that are not shared.
// - Every call ends within the backend's timeout: an error (IoError, Unavailable), never a hang.
// - Object names are the store's (manifest.json, kv-<hash>.safetensors, ckpt-<n>.json,
//   <hash>.json, name-secret): plain file names, never a client's string.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::memory::store {

// tenant: a validated tenant (agent_id.h) or empty for the root space; name: an agent's
// directory name (32 hex), "responses", or empty for the root space. The local backend names
// directories by `name` alone (the keyed hash covers the tenant); Redis keys carry both.
struct Space {
  std::string tenant;
  std::string name;
  bool operator==(const Space&) const = default;
};

// A stored object open for reading at offsets (a file, or bytes fetched whole).
class Blob {
 public:
  virtual ~Blob() = default;
  virtual uint64_t size() const = 0;
  virtual const std::string& where() const = 0;  // for messages: a path or a key
  // Exactly dst.size() bytes at `offset`: Corrupt when the object ends first, IoError when a
  // read fails.
  virtual Status ReadAt(uint64_t offset, std::span<uint8_t> dst) const = 0;
};

using Pieces = std::span<const std::span<const uint8_t>>;

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;

  // True when other processes share the objects (leases and versions matter).
  virtual bool shared() const = 0;
  // "directory /path" or "redis://host:port/db", for messages and logs.
  virtual std::string Describe() const = 0;
  virtual std::string Where(const Space& space, std::string_view name) const = 0;

  // Replaces the object with the concatenation of `pieces` (see the contract above).
  virtual Status Put(const Space& space, std::string_view name, Pieces pieces,
                     std::string_view fence) = 0;
  // Put that also advances the space's version; returns the new version.
  virtual Result<int64_t> Publish(const Space& space, std::string_view name,
                                  std::span<const uint8_t> bytes, std::string_view fence) = 0;
  // Writes the object only if it does not exist; false when it existed (and was left alone).
  virtual Result<bool> PutIfAbsent(const Space& space, std::string_view name,
                                   std::span<const uint8_t> bytes) = 0;
  // NotFound when there is no such object.
  virtual Result<std::unique_ptr<Blob>> Open(const Space& space, std::string_view name) const = 0;
  virtual Result<uint64_t> Size(const Space& space, std::string_view name) const = 0;
  virtual Status Remove(const Space& space, std::string_view name, std::string_view fence) = 0;
  // Object names of the space, unsorted; NotFound when the space does not exist.
  virtual Result<std::vector<std::string>> List(const Space& space) const = 0;
  // Agent spaces (names of 32 hex digits) that exist.
  virtual Result<std::vector<Space>> Spaces() const = 0;
  // Removes the space with every object in it, and advances its version.
  virtual Status RemoveSpace(const Space& space, std::string_view fence) = 0;
  // The space's version: what the last Publish or RemoveSpace returned; 0 before any.
  virtual Result<int64_t> Version(const Space& space) const = 0;

  // The agent's lease: one writer across servers. Waits up to `wait` while another holds it,
  // then Unavailable. The token returned is the fence for the space's mutations; a backend that
  // is not shared returns an empty token at once. Leases expire unless the holder stays alive
  // (a shared backend renews the leases it holds in the background).
  virtual Result<std::string> AcquireLease(const Space& space, std::chrono::milliseconds wait) = 0;
  virtual void ReleaseLease(const Space& space, std::string_view token) = 0;
};

}  // namespace kvmem::memory::store
