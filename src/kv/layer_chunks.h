// Memory for the per-layer storage of KvPool blocks, shared by many pools of one geometry and
// format (every agent's pool in a server). A pool gives its layer memory back here when it is
// destroyed instead of to the allocator, and takes from here before allocating, so memory
// written once is reused across agents; Reserve() pre-faults chunks ahead of the first request.
// Why: on these VMs a write to a freshly mapped page costs several times one to reused memory
// (64 MiB: 40 ms fresh vs 10 ms reused), which is most of what a warm agent load costs beyond
// reading its file. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace kvmem::kv {

class LayerChunks {
 public:
  // chunk_bytes: KvPool::layer_bytes() of the pools that use it. At most max_cached_bytes are
  // kept when returned; the rest are freed.
  LayerChunks(size_t chunk_bytes, size_t max_cached_bytes);

  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t cached_bytes() const;

  // A cached chunk (already written once) if there is one, else fresh memory.
  std::unique_ptr<uint8_t[]> Take();
  void Give(std::unique_ptr<uint8_t[]> chunk);
  // Allocates and writes chunks until `bytes` are cached (bounded by max_cached_bytes).
  void Reserve(size_t bytes);

 private:
  const size_t chunk_bytes_;
  const size_t max_cached_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> cached_;
};

}  // namespace kvmem::kv
