// The needle harness's prompt construction (eval/needle.h), with a byte-level tokenizer whose
// token count is the byte count + 1 (BOS), so every figure can be checked by hand.
#include "eval/needle.h"

#include <gtest/gtest.h>

#include <string>

#include "../tokenizer/byte_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::eval {
namespace {

using tokenizer::testing::ByteTokenizer;

std::string Haystack(int n_lines) {
  std::string h;
  for (int i = 0; i < n_lines; ++i) h += "Speaker " + std::to_string(i) + ": hello there.\n";
  return h;
}

TEST(Needle, PromptFitsPlantsTheLineAtTheDepthAndEndsWithTheQuestion) {
  const tokenizer::Tokenizer tok = ByteTokenizer();
  const std::string hay = Haystack(400);
  for (double depth : {0.0, 0.25, 0.5, 0.9, 1.0}) {
    auto p = BuildNeedlePrompt(hay, tok, 3000, depth, "walrus");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_LE(p->n_tokens, 3000);
    EXPECT_GT(p->n_tokens, 3000 - 64);  // whole lines of ~25 bytes: filled to within one line
    EXPECT_EQ(p->n_tokens, static_cast<int64_t>(p->text.size()) + 1);
    const std::string needle = NeedleSentence("walrus");
    const size_t at = p->text.find(needle);
    ASSERT_NE(at, std::string::npos);
    EXPECT_TRUE(at == 0 || p->text[at - 1] == '\n') << "the needle starts a line";
    EXPECT_EQ(p->needle_token, static_cast<int64_t>(at) + 1);
    EXPECT_NEAR(p->depth, depth, 0.02);
    const std::string q = kNeedleQuestion;
    EXPECT_EQ(p->text.substr(p->text.size() - q.size()), q);
  }
}

TEST(Needle, TooShortHaystackIsAnError) {
  const tokenizer::Tokenizer tok = ByteTokenizer();
  auto p = BuildNeedlePrompt(Haystack(10), tok, 3000, 0.5, "walrus");
  EXPECT_EQ(p.status().code(), ErrorCode::kFailedPrecondition);
}

TEST(Needle, WordsAreAbsentFromTheHaystackAndSeeded) {
  const std::string hay = "We saw a Walrus and a pelican at the lighthouse.";
  auto a = PickNeedleWords(hay, 7, 4);
  auto b = PickNeedleWords(hay, 7, 4);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->size(), 5u);
  for (const std::string& w : *a) {
    EXPECT_NE(w, "walrus");
    EXPECT_NE(w, "pelican");
    EXPECT_NE(w, "lighthouse");
  }
  std::string all;
  for (const std::string& w : NeedleWords()) all += w + " ";
  EXPECT_EQ(PickNeedleWords(all, 1, 1).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmem::eval
