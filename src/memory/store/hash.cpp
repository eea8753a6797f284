#include "memory/store/hash.h"

#include <xxhash.h>

#include <cassert>

namespace kvmem::memory::store {
namespace {

std::string Hex(XXH128_hash_t h) {
  // The canonical (big-endian) form, as `xxh128sum` prints it.
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kXxh128HexLen, '0');
  for (size_t i = 0; i < sizeof(c.digest); ++i) {
    out[2 * i] = kHex[c.digest[i] >> 4];
    out[2 * i + 1] = kHex[c.digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string Xxh128Hex(std::span<const uint8_t> bytes) {
  return Hex(XXH3_128bits(bytes.data(), bytes.size()));
}
std::string Xxh128Hex(std::string_view bytes) {
  return Hex(XXH3_128bits(bytes.data(), bytes.size()));
}

bool IsXxh128Hex(std::string_view s) {
  if (s.size() != kXxh128HexLen) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

struct Xxh128Stream::State {
  XXH3_state_t* s = nullptr;
  ~State() { XXH3_freeState(s); }
};

Xxh128Stream::Xxh128Stream() : state_(std::make_unique<State>()) {
  state_->s = XXH3_createState();
  assert(state_->s != nullptr);
  XXH3_128bits_reset(state_->s);
}
Xxh128Stream::~Xxh128Stream() = default;
Xxh128Stream::Xxh128Stream(Xxh128Stream&&) noexcept = default;
Xxh128Stream& Xxh128Stream::operator=(Xxh128Stream&&) noexcept = default;

void Xxh128Stream::Update(std::span<const uint8_t> bytes) {
  XXH3_128bits_update(state_->s, bytes.data(), bytes.size());
}

std::string Xxh128Stream::HexDigest() const { return Hex(XXH3_128bits_digest(state_->s)); }

}  // namespace kvmem::memory::store
