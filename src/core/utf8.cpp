#include "core/utf8.h"

#include <cstdint>

namespace kvmem {

Utf8Scan ScanUtf8(std::string_view s, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) {
    *len = 1;
    return Utf8Scan::kValid;
  }
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (RFC 3629 table)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    *len = 1;
    return Utf8Scan::kInvalid;
  }
  for (size_t i = 1; i < n; ++i) {
    if (i == s.size()) {
      *len = i;
      return Utf8Scan::kTruncated;
    }
    const auto b = static_cast<uint8_t>(s[i]);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *len = i;
      return Utf8Scan::kInvalid;
    }
  }
  *len = n;
  return Utf8Scan::kValid;
}

size_t Utf8CharLen(std::string_view s, size_t i) {
  size_t len;
  return ScanUtf8(s.substr(i), &len) == Utf8Scan::kValid ? len : 1;
}

size_t FindInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    if (ScanUtf8(s.substr(i), &len) != Utf8Scan::kValid) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool IsValidUtf8(std::string_view s) { return FindInvalidUtf8(s) == std::string_view::npos; }

size_t Utf8FloorBoundary(std::string_view s, size_t n) {
  // A sequence holding byte n-1 starts at most 3 bytes before n.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    if ((static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) continue;  // continuation byte
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
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
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

}  // namespace kvmem
