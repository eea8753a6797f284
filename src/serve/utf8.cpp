#include "serve/utf8.h"

#include <cstdint>

namespace kvmem::serve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

enum class Scan { kValid, kInvalid, kTruncated };

// Classifies the sequence starting at s[0]. On kValid, *len is its length; on kInvalid, the
// length of the maximal invalid subpart to replace (>= 1); on kTruncated, a valid prefix of a
// sequence reaches the end of `s`.
Scan ScanOne(std::string_view s, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) {
    *len = 1;
    return Scan::kValid;
  }
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
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
    return Scan::kInvalid;
  }
  for (size_t i = 1; i < n; ++i) {
    if (i == s.size()) {
      *len = i;
      return Scan::kTruncated;
    }
    const auto b = static_cast<uint8_t>(s[i]);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *len = i;
      return Scan::kInvalid;
    }
  }
  *len = n;
  return Scan::kValid;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    if (ScanOne(s.substr(i), &len) != Scan::kValid) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string Utf8Assembler::Push(std::string_view piece) {
  pending_.append(piece);
  std::string out;
  out.reserve(pending_.size());
  const std::string_view s = pending_;
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    const Scan scan = ScanOne(s.substr(i), &len);
    if (scan == Scan::kTruncated) break;
    if (scan == Scan::kValid) {
      out.append(s.substr(i, len));
    } else {
      out.append(kReplacement);
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Assembler::Flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace kvmem::serve
