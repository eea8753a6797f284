// Cheap stable hashes (FNV-1a 64) for regression fingerprints such as the final-logits hash
// printed by `kvmem run`. Not for security. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvmem {

inline uint64_t Fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
inline uint64_t Fnv1a64(std::string_view s) { return Fnv1a64(s.data(), s.size()); }

}  // namespace kvmem
