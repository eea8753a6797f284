#include "memory/store/utf8.h"

#include <cstdint>

namespace kvmem::memory::store {

size_t Utf8CharLen(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte (RFC 3629 table)
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 1;
  }
  if (i + len > s.size()) return 1;
  if (b(i + 1) < lo || b(i + 1) > hi) return 1;
  for (size_t k = 2; k < len; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 1;
  }
  return len;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8CharLen(s, i);
    if (n == 1 && static_cast<uint8_t>(s[i]) >= 0x80) return false;
    i += n;
  }
  return true;
}

size_t Utf8FloorBoundary(std::string_view s, size_t n) {
  // A sequence holding byte n-1... starts at most 3 bytes before n.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    if ((static_cast<uint8_t>(s[start]) & 0xc0) == 0x80) continue;  // continuation byte
    const size_t len = Utf8CharLen(s, start);
    return start + len > n ? start : n;
  }
  return n;
}

size_t Utf8Count(std::string_view s) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); i += Utf8CharLen(s, i)) ++count;
  return count;
}

std::string Quoted(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMaxShown) out += "...";
  out += "'";
  return out;
}

}  // namespace kvmem::memory::store
