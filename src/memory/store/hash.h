// XXH3-128 digests as 32 lowercase hex characters: block checksums and content-addressed block
// names, model fingerprints, agent directory names. XXH3 is not cryptographic: it detects
// corruption (bit rot, truncation, a file from another model) and spreads names, but a writer
// with access to the store can forge a collision; the store directory is trusted to the extent
// its permissions say (0700). Thread-safe: pure functions; an Xxh128Stream is one caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace kvmem::memory::store {

inline constexpr size_t kXxh128HexLen = 32;

std::string Xxh128Hex(std::span<const uint8_t> bytes);
std::string Xxh128Hex(std::string_view bytes);

// True for exactly kXxh128HexLen characters [0-9a-f].
bool IsXxh128Hex(std::string_view s);

// The digest of bytes fed in pieces, equal to Xxh128Hex of their concatenation.
class Xxh128Stream {
 public:
  Xxh128Stream();
  ~Xxh128Stream();
  Xxh128Stream(Xxh128Stream&&) noexcept;
  Xxh128Stream& operator=(Xxh128Stream&&) noexcept;

  void Update(std::span<const uint8_t> bytes);
  std::string HexDigest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvmem::memory::store
