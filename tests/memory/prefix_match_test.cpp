// Character-level prefix matching (semantic.md §3.3): EXACT / EXTEND / DIVERGE, matches that
// never end inside a UTF-8 sequence, and the token-level plan with a toy tokenizer whose merges
// shift at the boundary the way BPE's do.
#include "memory/store/prefix_match.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/utf8.h"

namespace kvmem::memory::store {
namespace {

// Greedy longest match over a small vocabulary; unknown bytes become their own ids (1000+b).
// Not compositional: "Hello world" -> [Hello][ world], "Hello worldwide" -> [Hello][ worldwide].
class ToyTokenizer {
 public:
  ToyTokenizer() {
    for (const char* p : {"Hello", " world", " worldwide", " wor", "ld", " How", " are", " you",
                          "caf", "\xc3\xa9", "\xc3\xa8", " ", "!", "\xe2\x98\x83"}) {
      ids_[p] = static_cast<int32_t>(pieces_.size());
      pieces_.push_back(p);
    }
  }
  Result<std::vector<int32_t>> Encode(std::string_view text) const {
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      size_t best = 0;
      int32_t id = 1000 + static_cast<uint8_t>(text[i]);
      for (const auto& [piece, pid] : ids_) {
        if (piece.size() > best && text.substr(i, piece.size()) == piece) {
          best = piece.size();
          id = pid;
        }
      }
      out.push_back(id);
      i += best > 0 ? best : 1;
    }
    return out;
  }
  std::string_view Piece(int32_t id) const {
    if (id >= 1000) return std::string_view(&kBytes[id - 1000], 1);
    return pieces_[id];
  }
  TokenizeFn tokenize() const {
    return [this](std::string_view t) { return Encode(t); };
  }
  TokenPieceFn piece() const {
    return [this](int32_t id) { return Piece(id); };
  }

 private:
  static inline const std::string kBytes = [] {
    std::string s(256, '\0');
    for (int i = 0; i < 256; ++i) s[i] = static_cast<char>(i);
    return s;
  }();
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> pieces_;
};

TEST(PrefixMatchTest, TextOutcomes) {
  TextMatch m = MatchText("Hello world", "Hello world");
  EXPECT_EQ(m.kind, PrefixMatchKind::kExact);
  EXPECT_EQ(m.matched_bytes, 11u);
  EXPECT_DOUBLE_EQ(m.ratio, 1.0);

  m = MatchText("Hello world", "Hello world How are you");
  EXPECT_EQ(m.kind, PrefixMatchKind::kExtend);
  EXPECT_EQ(m.matched_bytes, 11u);

  m = MatchText("Hello world", "Hello there");
  EXPECT_EQ(m.kind, PrefixMatchKind::kDiverge);
  EXPECT_EQ(m.matched_bytes, 6u);
  EXPECT_EQ(m.matched_chars, 6u);
  EXPECT_DOUBLE_EQ(m.ratio, 6.0 / 11.0);

  // New prompt shorter than the stored text: the stored tail is not matched.
  m = MatchText("Hello world", "Hello");
  EXPECT_EQ(m.kind, PrefixMatchKind::kDiverge);
  EXPECT_EQ(m.matched_bytes, 5u);

  EXPECT_EQ(MatchText("", "").kind, PrefixMatchKind::kExact);
  EXPECT_EQ(MatchText("", "abc").kind, PrefixMatchKind::kExtend);
  EXPECT_EQ(MatchText("abc", "").kind, PrefixMatchKind::kDiverge);
  EXPECT_DOUBLE_EQ(MatchText("", "abc").ratio, 1.0);
  EXPECT_STREQ(PrefixMatchKindName(PrefixMatchKind::kDiverge), "diverge");
}

TEST(PrefixMatchTest, NeverSplitsAUtf8Character) {
  // "café" vs "cafè": é = C3 A9, è = C3 A8 share their lead byte; the match stops before it.
  TextMatch m = MatchText("caf\xc3\xa9", "caf\xc3\xa8");
  EXPECT_EQ(m.kind, PrefixMatchKind::kDiverge);
  EXPECT_EQ(m.matched_bytes, 3u);
  EXPECT_EQ(m.matched_chars, 3u);
  EXPECT_EQ(m.stored_chars, 4u);
  EXPECT_DOUBLE_EQ(m.ratio, 0.75);

  // A 3-byte snowman cut after two bytes in the new prompt.
  m = MatchText("a\xe2\x98\x83", "a\xe2\x98");
  EXPECT_EQ(m.matched_bytes, 1u);
  // A 4-byte character differing in its last byte.
  m = MatchText("x\xf0\x9f\x98\x80y", "x\xf0\x9f\x98\x81y");
  EXPECT_EQ(m.matched_bytes, 1u);
  // Extending after a multi-byte character is a clean EXTEND.
  m = MatchText("caf\xc3\xa9", "caf\xc3\xa9!");
  EXPECT_EQ(m.kind, PrefixMatchKind::kExtend);
  EXPECT_EQ(m.matched_bytes, 5u);
  EXPECT_EQ(m.matched_chars, 4u);
  // Invalid bytes are characters of their own: a stray continuation byte can be matched.
  m = MatchText(
      "a\x80"
      "b",
      "a\x80"
      "c");
  EXPECT_EQ(m.matched_bytes, 2u);
  // Lead byte followed by ASCII in the new text (invalid there) but a full character in the
  // stored text: byte 3 is inside a character of the stored text, so the match ends at 3.
  m = MatchText("caf\xc3\xa9", "caf\xc3z");
  EXPECT_EQ(m.matched_bytes, 3u);
}

TEST(PrefixMatchTest, Utf8Helpers) {
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x98"));          // cut
  EXPECT_EQ(Utf8Count("caf\xc3\xa9"), 4u);
  EXPECT_EQ(Utf8FloorBoundary("caf\xc3\xa9", 4), 3u);
  EXPECT_EQ(Utf8FloorBoundary("caf\xc3\xa9", 5), 5u);
}

TEST(PrefixMatchTest, ExtendPrefillsOnlyTheNewSuffix) {
  ToyTokenizer tok;
  const std::string stored = "Hello world";
  const std::vector<int32_t> ids = *tok.Encode(stored);
  ASSERT_EQ(ids.size(), 2u);
  Result<ReusePlan> p =
      PlanReuse(stored, ids, "Hello world How are you", tok.tokenize(), tok.piece());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.kind, PrefixMatchKind::kExtend);
  EXPECT_EQ(p->keep_tokens, 2);
  EXPECT_EQ(p->prefill, *tok.Encode(" How are you"));
}

TEST(PrefixMatchTest, ExtendAcrossAShiftedMergeRecomputesTheBoundaryToken) {
  ToyTokenizer tok;
  const std::string stored = "Hello world";
  const std::vector<int32_t> ids = *tok.Encode(stored);
  // " world" + "wide" merges into " worldwide": the stored " world" token is not reused.
  Result<ReusePlan> p = PlanReuse(stored, ids, "Hello worldwide", tok.tokenize(), tok.piece());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.kind, PrefixMatchKind::kExtend);
  EXPECT_EQ(p->text_matched_tokens, 2);
  EXPECT_EQ(p->keep_tokens, 1);
  ASSERT_EQ(p->prefill.size(), 1u);
  EXPECT_EQ(tok.Piece(p->prefill[0]), " worldwide");
}

TEST(PrefixMatchTest, ExactStillPrefillsTheLastToken) {
  ToyTokenizer tok;
  const std::vector<int32_t> ids = *tok.Encode("Hello world!");
  Result<ReusePlan> p = PlanReuse("Hello world!", ids, "Hello world!", tok.tokenize(), tok.piece());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.kind, PrefixMatchKind::kExact);
  EXPECT_EQ(p->keep_tokens, 2);
  EXPECT_EQ(p->prefill, std::vector<int32_t>{ids.back()});
}

TEST(PrefixMatchTest, DivergeTrimsAboveTheThresholdAndDiscardsBelow) {
  ToyTokenizer tok;
  // 16 characters stored; the new text differs in the last one (ratio 15/16 >= 0.8).
  const std::string stored = "Hello world How!";
  const std::vector<int32_t> ids = *tok.Encode(stored);  // [Hello][ world][ How][!]
  Result<ReusePlan> p =
      PlanReuse(stored, ids, "Hello world How are you", tok.tokenize(), tok.piece());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.kind, PrefixMatchKind::kDiverge);
  EXPECT_EQ(p->text.matched_bytes, 15u);
  EXPECT_EQ(p->keep_tokens, 3);
  EXPECT_EQ(p->prefill, *tok.Encode(" are you"));
  EXPECT_TRUE(p->reuse());

  // "Hello wor" of "Hello world How!" (9 / 16 < 0.8): discard, prefill everything.
  p = PlanReuse(stored, ids, "Hello wor", tok.tokenize(), tok.piece());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.kind, PrefixMatchKind::kDiverge);
  EXPECT_FALSE(p->reuse());
  EXPECT_EQ(p->prefill, *tok.Encode("Hello wor"));

  // The threshold is configurable.
  p = PlanReuse(stored, ids, "Hello wor", tok.tokenize(), tok.piece(), {.min_diverge_ratio = 0.5});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->keep_tokens, 1);  // [Hello]; " world" ends past the match
  EXPECT_EQ(p->prefill, *tok.Encode(" wor"));
}

TEST(PrefixMatchTest, DivergeInsideAMultiByteCharacter) {
  ToyTokenizer tok;
  // [caf][é] vs [caf][è]: both é and è are single tokens starting with byte C3.
  const std::string stored = "caf\xc3\xa9";
  const std::vector<int32_t> ids = *tok.Encode(stored);
  ASSERT_EQ(ids.size(), 2u);
  Result<ReusePlan> p = PlanReuse(stored, ids, "caf\xc3\xa8", tok.tokenize(), tok.piece(),
                                  {.min_diverge_ratio = 0.7});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->text.matched_bytes, 3u);
  EXPECT_EQ(p->keep_tokens, 1);
  EXPECT_EQ(p->prefill, std::vector<int32_t>{*tok.Encode("\xc3\xa8")});

  // Byte-level tokens that split a character: only tokens ending at or before the match count.
  const std::vector<int32_t> bytes = {1000 + 'c', 1000 + 'a', 1000 + 'f', 1000 + 0xc3, 1000 + 0xa9};
  EXPECT_EQ(TokensWithinText(bytes, stored, 3, tok.piece()), 3);
  EXPECT_EQ(TokensWithinText(bytes, stored, 5, tok.piece()), 5);
  // A piece that does not spell the text stops the count.
  const std::vector<int32_t> wrong = {1000 + 'c', 1000 + 'x'};
  EXPECT_EQ(TokensWithinText(wrong, stored, 5, tok.piece()), 1);
}

TEST(PrefixMatchTest, TokenTextEnds) {
  ToyTokenizer tok;
  const std::vector<int32_t> ids = *tok.Encode("Hello world caf\xc3\xa9");
  EXPECT_EQ(TokenTextEnds(ids, tok.piece()), (std::vector<size_t>{5, 11, 12, 15, 17}));
}

TEST(PrefixMatchTest, TokenizerErrorsPropagate) {
  TokenizeFn failing = [](std::string_view) -> Result<std::vector<int32_t>> {
    return InvalidArgument("bad text");
  };
  Result<ReusePlan> p = PlanReuse("a", std::vector<int32_t>{1}, "ab", failing, {});
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("tokenizing the new prompt"), std::string::npos);
}

}  // namespace
}  // namespace kvmem::memory::store
