#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvmem::tokenizer {
namespace {

TEST(Unicode, Categories) {
  EXPECT_EQ(CodepointFlags('a'), kCpLetter | kCpLower);
  EXPECT_EQ(CodepointFlags('Q'), kCpLetter | kCpUpper);
  EXPECT_EQ(CodepointFlags(0x01C5), kCpLetter | kCpUpper);  // Dz with caron (Lt)
  EXPECT_EQ(CodepointFlags(0x02B0), kCpLetter);             // modifier small h (Lm)
  EXPECT_EQ(CodepointFlags('7'), kCpNumber);
  EXPECT_EQ(CodepointFlags(' '), kCpSeparator | kCpWhitespace);
  EXPECT_EQ(CodepointFlags('\n'), kCpWhitespace);
  EXPECT_EQ(CodepointFlags('!'), kCpPunct);
  EXPECT_EQ(CodepointFlags('$'), kCpSymbol);
  EXPECT_EQ(CodepointFlags(0x00), 0);
  EXPECT_EQ(CodepointFlags(0x1C), 0);  // not White_Space (Python's isspace says yes)
  EXPECT_EQ(CodepointFlags(0x85), kCpWhitespace);
  EXPECT_EQ(CodepointFlags(0xA0), kCpSeparator | kCpWhitespace);
  EXPECT_EQ(CodepointFlags(0x3000), kCpSeparator | kCpWhitespace);
  EXPECT_EQ(CodepointFlags(0x2028), kCpSeparator | kCpWhitespace);
  EXPECT_EQ(CodepointFlags(0x200B), 0);           // zero width space is Cf
  EXPECT_EQ(CodepointFlags(0x4E2D), kCpLetter);   // 中
  EXPECT_EQ(CodepointFlags(0x0661), kCpNumber);   // Arabic-Indic one
  EXPECT_EQ(CodepointFlags(0x216B), kCpNumber);   // Roman numeral (Nl)
  EXPECT_EQ(CodepointFlags(0x00BD), kCpNumber);   // ½ (No)
  EXPECT_EQ(CodepointFlags(0x0301), kCpMark);     // combining acute
  EXPECT_EQ(CodepointFlags(0x1F600), kCpSymbol);  // 😀
  EXPECT_EQ(CodepointFlags(0x20000), kCpLetter);  // CJK extension B
  EXPECT_EQ(CodepointFlags(0x10FFFF), 0);
  EXPECT_EQ(CodepointFlags(0x110000), 0);
}

TEST(Unicode, DecodeValid) {
  const std::string s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
  Utf8Char c = DecodeUtf8(s, 0);
  EXPECT_EQ(c.cp, 'a');
  c = DecodeUtf8(s, 1);
  EXPECT_TRUE(c.valid);
  EXPECT_EQ(c.cp, 0xE9u);
  EXPECT_EQ(c.len, 2);
  c = DecodeUtf8(s, 3);
  EXPECT_EQ(c.cp, 0x4E2Du);
  EXPECT_EQ(c.len, 3);
  c = DecodeUtf8(s, 6);
  EXPECT_EQ(c.cp, 0x1F600u);
  EXPECT_EQ(c.len, 4);
}

TEST(Unicode, DecodeInvalidConsumesOneByte) {
  for (std::string bad : {std::string("\x80"), std::string("\xC0\xAF"), std::string("\xC3"),
                          std::string("\xE4\xB8"), std::string("\xED\xA0\x80"),  // surrogate
                          std::string("\xF4\x90\x80\x80"),                       // > U+10FFFF
                          std::string("\xE0\x80\xAF"),                           // overlong
                          std::string("\xFF"), std::string("\xC3(")}) {
    const Utf8Char c = DecodeUtf8(bad, 0);
    EXPECT_FALSE(c.valid) << bad;
    EXPECT_EQ(c.len, 1);
    EXPECT_EQ(c.cp, static_cast<uint8_t>(bad[0]));
    EXPECT_EQ(CharFlags(c), 0);
  }
}

TEST(Unicode, EncodeDecodeAllCodepoints) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    AppendUtf8(cp, &s);
    const Utf8Char c = DecodeUtf8(s, 0);
    ASSERT_TRUE(c.valid) << cp;
    ASSERT_EQ(c.cp, cp);
    ASSERT_EQ(c.len, s.size());
    ASSERT_EQ(CompleteUtf8Prefix(s), s.size());
    for (size_t cut = 1; cut < s.size(); ++cut) {
      ASSERT_EQ(CompleteUtf8Prefix(s.substr(0, cut)), 0u) << cp << " cut " << cut;
      std::string after_ascii = "x";
      after_ascii.append(s, 0, cut);
      ASSERT_EQ(CompleteUtf8Prefix(after_ascii), 1u);
    }
  }
}

TEST(Unicode, CompleteUtf8PrefixReleasesInvalidBytes) {
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("\x80\x80"), 2u);  // stray continuations never complete
  EXPECT_EQ(CompleteUtf8Prefix("\xFF"), 1u);      // not a lead byte
  EXPECT_EQ(CompleteUtf8Prefix("\xE0\x80"), 2u);  // overlong prefix can never be valid
  EXPECT_EQ(CompleteUtf8Prefix("\xE4\xB8"
                               "a"),
            3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\x98"), 1u);
}

TEST(Unicode, ByteLevelAlphabet) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = ByteToUnicode(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(UnicodeToByte(cp), b);
    // Every image is a printable, non-space character.
    EXPECT_FALSE(CodepointFlags(cp) & kCpWhitespace) << b;
    EXPECT_NE(CodepointFlags(cp), 0) << b;
  }
  EXPECT_EQ(ByteToUnicode(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(ByteToUnicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(ByteToUnicode('A'), static_cast<uint32_t>('A'));
  EXPECT_EQ(UnicodeToByte(0x4E2D), -1);
}

}  // namespace
}  // namespace kvmem::tokenizer
