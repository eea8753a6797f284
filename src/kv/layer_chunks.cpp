#include "kv/layer_chunks.h"

#include <algorithm>
#include <cstring>

namespace kvmem::kv {

LayerChunks::LayerChunks(size_t chunk_bytes, size_t max_cached_bytes)
    : chunk_bytes_(chunk_bytes), max_cached_(max_cached_bytes) {}

size_t LayerChunks::cached_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return cached_.size() * chunk_bytes_;
}

std::unique_ptr<uint8_t[]> LayerChunks::Take() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!cached_.empty()) {
      std::unique_ptr<uint8_t[]> c = std::move(cached_.back());
      cached_.pop_back();
      return c;
    }
  }
  // Not value-initialized: rows are written before they are read.
  return std::unique_ptr<uint8_t[]>(new uint8_t[chunk_bytes_]);
}

void LayerChunks::Give(std::unique_ptr<uint8_t[]> chunk) {
  std::lock_guard<std::mutex> l(mu_);
  if ((cached_.size() + 1) * chunk_bytes_ <= max_cached_) cached_.push_back(std::move(chunk));
}

void LayerChunks::Reserve(size_t bytes) {
  const size_t target = std::min(bytes, max_cached_) / chunk_bytes_;
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cached_.size() >= target) return;
    }
    std::unique_ptr<uint8_t[]> c(new uint8_t[chunk_bytes_]);
    std::memset(c.get(), 0, chunk_bytes_);  // fault the pages in now
    Give(std::move(c));
  }
}

}  // namespace kvmem::kv
