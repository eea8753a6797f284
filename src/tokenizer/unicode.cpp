#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace kvmem::tokenizer {
namespace {

uint16_t LookupFlags(uint32_t cp) {
  const uint32_t* begin = internal::kCategoryRanges;
  const uint32_t* end = begin + internal::kNumCategoryRanges;
  // First entry whose start is > cp; the one before it holds cp.
  const uint32_t* it = std::upper_bound(
      begin, end, cp, [](uint32_t value, uint32_t entry) { return value < (entry & 0x1FFFFFu); });
  if (it == begin) return 0;
  return static_cast<uint16_t>(*(it - 1) >> 21);
}

// Latin-1 is by far the most common input; a flat table skips the binary search.
const std::array<uint16_t, 256>& Latin1Flags() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    for (uint32_t cp = 0; cp < 256; ++cp) t[cp] = LookupFlags(cp);
    return t;
  }();
  return table;
}

struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // the alphabet lies within U+0000..U+0143
};

const ByteLevelTables& ByteTables() {
  static const ByteLevelTables tables = [] {
    ByteLevelTables t;
    t.cp_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next_extra++;
      t.byte_to_cp[b] = cp;
      t.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

uint16_t CodepointFlags(uint32_t cp) {
  if (cp < 256) return Latin1Flags()[cp];
  if (cp > 0x10FFFF) return 0;
  return LookupFlags(cp);
}

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;  // continuation byte, or overlong 2-byte lead C0/C1
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

namespace {

// Allowed range of the second byte given the lead (excludes overlongs, surrogates, > U+10FFFF).
bool SecondByteOk(uint8_t lead, uint8_t second) {
  switch (lead) {
    case 0xE0:
      return second >= 0xA0 && second <= 0xBF;
    case 0xED:
      return second >= 0x80 && second <= 0x9F;
    case 0xF0:
      return second >= 0x90 && second <= 0xBF;
    case 0xF4:
      return second >= 0x80 && second <= 0x8F;
    default:
      return second >= 0x80 && second <= 0xBF;
  }
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t lead = s[pos];
  const int len = Utf8SequenceLength(lead);
  const Utf8Char raw{lead, 1, false};
  if (len == 1) return {lead, 1, true};
  if (len == 0 || pos + len > text.size()) return raw;
  if (!SecondByteOk(lead, s[pos + 1])) return raw;
  for (int i = 2; i < len; ++i) {
    if (!IsContinuation(s[pos + i])) return raw;
  }
  uint32_t cp = lead & (0x7F >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (s[pos + i] & 0x3F);
  return {cp, static_cast<uint8_t>(len), true};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Only the last (up to 3) bytes can belong to an unfinished sequence.
  const size_t n = bytes.size();
  const size_t lookback = std::min<size_t>(n, 3);
  for (size_t back = 1; back <= lookback; ++back) {
    const size_t start = n - back;
    const auto lead = static_cast<uint8_t>(bytes[start]);
    if (IsContinuation(lead)) continue;
    const int len = Utf8SequenceLength(lead);
    if (len <= static_cast<int>(back)) return n;  // complete, ASCII or invalid lead
    // A truncated sequence is held back only if what is there could still become valid.
    if (back >= 2 && !SecondByteOk(lead, static_cast<uint8_t>(bytes[start + 1]))) return n;
    for (size_t i = start + 2; i < n; ++i) {
      if (!IsContinuation(static_cast<uint8_t>(bytes[i]))) return n;
    }
    return start;
  }
  return n;
}

uint32_t ByteToUnicode(uint8_t byte) { return ByteTables().byte_to_cp[byte]; }

int UnicodeToByte(uint32_t cp) {
  const auto& t = ByteTables().cp_to_byte;
  return cp < t.size() ? t[cp] : -1;
}

}  // namespace kvmem::tokenizer
