// The local-directory tier of a shared store's read-through block cache (redis_backend.h): the
// block objects a server read from Redis, kept in a directory on its own disk so that a restarted
// server, or another one on the same machine, reads them from Redis no more. Blocks are
// immutable (named by their content's hash), so a cached copy never goes stale; which blocks an
// agent has is always read from Redis (its manifest).
//
// One file per key, named by the key's XXH128 (32 hex): the object's bytes, then the key, its
// length (u32 little-endian) and the XXH128 of bytes and key (32 hex). A read checks all of
// it, so a file that is torn, damaged or written for another key reads as a miss and is removed;
// the cache never returns bytes it did not store under that key. Files are written to a
// temporary name and renamed, without fsync (a cache: after a crash, a torn file is a miss).
//
// Bounded by max_bytes: past it, the least recently used files (of those this process has seen:
// its own writes and reads, and what was there when it opened) are removed. Several processes
// may share one directory; each keeps its own view of the bound.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/status.h"

namespace kvmem::memory::store {

class DiskCache {
 public:
  // Creates `dir` (0700) when missing and indexes the files in it, oldest first; removes
  // temporary files left by a writer that died.
  static Result<std::unique_ptr<DiskCache>> Open(std::string dir, uint64_t max_bytes);

  const std::string& dir() const { return dir_; }
  // The object stored under `key`, or nullptr (missing, damaged, another key's).
  std::shared_ptr<const std::string> Get(std::string_view key);
  // Stores a copy; best effort (a failed write only leaves the object uncached).
  void Put(std::string_view key, std::string_view bytes);
  void Remove(std::string_view key);
  // Bytes of the files in this process's view.
  uint64_t bytes() const;

 private:
  DiskCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(const std::string& file) const { return dir_ + "/" + file; }
  // Records `file` (size bytes) as the most recently used, then removes the least recently
  // used files past the bound. Under mu_.
  void Touch(const std::string& file, uint64_t size);
  void Drop(const std::string& file);  // under mu_

  const std::string dir_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  struct Entry {
    uint64_t size;
    std::list<std::string>::iterator lru;
  };
  std::list<std::string> lru_;  // file names, most recent first
  std::unordered_map<std::string, Entry> files_;
  uint64_t used_ = 0;
};

}  // namespace kvmem::memory::store
