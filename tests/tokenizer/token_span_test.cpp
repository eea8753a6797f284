// FindTokenSpan (tokenizer/token_span.h): with one token per byte the span is the part's byte
// range, counted by hand; with the real SmolLM2 and Gemma-3 tokenizers (skipped when absent) the
// tokens before the span decode to the text before the part and the span's to the part, each
// end off by at most the few bytes of a token that straddles it.
#include "tokenizer/token_span.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "byte_tokenizer.h"
#include "test_util.h"

namespace kvmem::tokenizer {
namespace {

TEST(FindTokenSpan, OneTokenPerByteIsTheByteRange) {
  const Tokenizer tok = testing::ByteTokenizer();
  const std::string text = "ask: where? then ask: where is it? end";
  const std::vector<int32_t> ids = tok.Encode(text, /*add_special=*/false, true);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(*FindTokenSpan(tok, text, ids, "where is it?"), (TokenSpan{22, 34}));
  EXPECT_EQ(*FindTokenSpan(tok, text, ids, "ask: "), (TokenSpan{17, 22}));  // the last place
  EXPECT_EQ(*FindTokenSpan(tok, text, ids, text), (TokenSpan{0, 38}));
  EXPECT_EQ(FindTokenSpan(tok, text, ids, "when").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(FindTokenSpan(tok, text, ids, "").status().code(), ErrorCode::kNotFound);
}

void ExpectSpansDecodeToTheirParts(const Tokenizer* tok) {
  if (tok == nullptr) GTEST_SKIP() << "tokenizer not present";
  const std::string text =
      "<|im_start|>user\nBased on the conversation above, answer.\nQuestion: When did Mel "
      "paint a sunrise?<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int32_t> ids = tok->Encode(text, /*add_special=*/false, true);
  for (const std::string part : {"When did Mel paint a sunrise?", "Question:", "sunrise",
                                 "Based on the conversation above, answer.\nQuestion: When"}) {
    SCOPED_TRACE(part);
    Result<TokenSpan> s = FindTokenSpan(*tok, text, ids, part);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_LT(s->begin, s->end);
    auto decode = [&](int64_t from, int64_t to) {
      return *tok->Decode(std::span(ids).subspan(from, to - from), /*render_special=*/true);
    };
    // The tokens before the span spell the text before it, and the span's tokens what follows:
    // bytes [b0, b1), each end at most 8 bytes before the part's.
    const std::string before = decode(0, s->begin);
    const std::string got = decode(s->begin, s->end);
    const size_t b0 = before.size(), b1 = b0 + got.size(), at = text.rfind(part);
    EXPECT_EQ(before + got, text.substr(0, b1)) << testing::Escaped(got);
    EXPECT_LE(b0, at);
    EXPECT_GE(b0 + 8, at);
    EXPECT_LE(b1, at + part.size());
    EXPECT_GE(b1 + 8, at + part.size());
  }
}

TEST(FindTokenSpan, RealTokenizersSpellThePart) {
  {
    SCOPED_TRACE("SmolLM2");
    ExpectSpansDecodeToTheirParts(testing::SmolLm2());
  }
  {
    SCOPED_TRACE("Gemma-3");
    ExpectSpansDecodeToTheirParts(testing::Gemma3());
  }
}

}  // namespace
}  // namespace kvmem::tokenizer
