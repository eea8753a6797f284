// NFC against Python's unicodedata (nfc_vectors.json, cross-checked there against Hugging Face
// `tokenizers`' NFC normalizer), plus cases that pin down each step of the algorithm.
#include "tokenizer/nfc.h"

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace kvmem::tokenizer {
namespace {

TEST(Nfc, Steps) {
  EXPECT_EQ(NormalizeNfc(""), "");
  EXPECT_EQ(NormalizeNfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(NormalizeNfc("e\xCC\x81"), "\xC3\xA9");                   // compose e + acute
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xAB"), "\xC3\x85");                // singleton: Angstrom sign
  EXPECT_EQ(NormalizeNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");  // reorder by class
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul LVT
  EXPECT_EQ(NormalizeNfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // exclusion stays apart
  EXPECT_EQ(NormalizeNfc("\xCC\x81"
                         "a"),
            "\xCC\x81"
            "a");  // leading mark: no base
  // Invalid bytes pass through and block composition.
  EXPECT_EQ(NormalizeNfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(CanonicalCombiningClass(0x301), 230);
  EXPECT_EQ(CanonicalCombiningClass('a'), 0);
}

TEST(Nfc, MatchesPythonUnicodedata) {
  const auto vectors = testing::LoadVectors("nfc_vectors.json");
  const auto& cases = vectors["cases"];
  ASSERT_GT(cases.size(), 5000u);
  int passed = 0;
  for (const auto& c : cases) {
    const std::string in = c[0], want = c[1];
    const std::string got = NormalizeNfc(in);
    EXPECT_EQ(got, want) << testing::Escaped(in);
    passed += got == want;
  }
  EXPECT_EQ(passed, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace kvmem::tokenizer
