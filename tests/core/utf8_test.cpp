// core/utf8.h against an independent definition: decode the bytes arithmetically into a code
// point and accept it iff it needs exactly that many bytes (no overlong form), is not a
// surrogate and is at most U+10FFFF (RFC 3629 §3). Checked on every 1-, 2- and 3-byte string
// and on 4-byte strings around every lead byte.
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace kvmem {
namespace {

// Independent reference: is s exactly one well-formed UTF-8 character?
bool OneValidChar(const std::string& s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const size_t n = s.size();
  if (n == 1) return b(0) < 0x80;
  unsigned lead_bits = n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0;
  unsigned lead_mask = n == 2 ? 0xE0 : n == 3 ? 0xF0 : 0xF8;
  if ((b(0) & lead_mask) != lead_bits) return false;
  uint32_t cp = b(0) & ~lead_mask & 0xFF;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  return cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

void Check(const std::string& s) {
  size_t len = 0;
  const Utf8Scan scan = ScanUtf8(s, &len);
  ASSERT_EQ(scan == Utf8Scan::kValid && len == s.size(), OneValidChar(s))
      << Quoted(s) << " scan " << static_cast<int>(scan) << " len " << len;
  ASSERT_EQ(IsValidUtf8(s), OneValidChar(s) || (s.size() > 1 && IsValidUtf8(s.substr(0, 1)) &&
                                                IsValidUtf8(s.substr(1))))
      << Quoted(s);
}

TEST(Utf8, AgreesWithArithmeticDecodingOnShortStrings) {
  for (int a = 0; a < 256; ++a) {
    Check(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) {
      Check(std::string{static_cast<char>(a), static_cast<char>(b)});
      if (a >= 0xE0 && a <= 0xEF) {
        for (int c = 0x70; c < 0xD0; ++c) {
          Check(std::string{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        }
      }
      if (a >= 0xF0 && a <= 0xF5 && (b == 0x80 || b == 0x8F || b == 0x90 || b == 0xBF)) {
        Check(std::string{static_cast<char>(a), static_cast<char>(b), '\x80', '\xBF'});
      }
    }
  }
}

TEST(Utf8, TruncatedBoundariesCountsAndQuoting) {
  size_t len = 0;
  EXPECT_EQ(ScanUtf8("\xE2\x98", &len), Utf8Scan::kTruncated);
  EXPECT_EQ(len, 2u);
  EXPECT_EQ(ScanUtf8("\xE2\x41", &len), Utf8Scan::kInvalid);
  EXPECT_EQ(len, 1u);  // the maximal invalid subpart is the lead byte alone
  EXPECT_EQ(FindInvalidUtf8("ok \xE2\x98"), 3u);
  EXPECT_EQ(FindInvalidUtf8("caf\xC3\xA9"), std::string_view::npos);
  EXPECT_EQ(Utf8Count("caf\xC3\xA9 \xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(Utf8FloorBoundary("caf\xC3\xA9", 4), 3u);
  EXPECT_EQ(Utf8FloorBoundary("caf\xC3\xA9", 5), 5u);
  EXPECT_EQ(Quoted("a'b\n"), "'a\\x27b\\x0a'");
  EXPECT_EQ(Quoted(std::string(100, 'x')), "'" + std::string(80, 'x') + "...'");
}

}  // namespace
}  // namespace kvmem
