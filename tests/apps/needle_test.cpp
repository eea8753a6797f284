// The needle harness's prompt construction (eval/needle.h), with a byte-level tokenizer whose
// token count is the byte count + 1 (BOS), so every figure can be checked by hand.
#include "eval/needle.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/tokenizer.h"

namespace kvmem::eval {
namespace {

// GPT-2's byte-to-unicode alphabet as UTF-8 (printable bytes map to themselves).
std::string ByteChar(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

tokenizer::Tokenizer ByteTokenizer() {
  tokenizer::TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  for (int b = 0; b < 256; ++b) c.tokens.push_back(ByteChar(b));
  c.token_types.assign(256, 1);
  c.tokens.push_back("<s>");
  c.token_types.push_back(3);
  c.bos_id = 256;
  c.add_bos = true;
  auto t = tokenizer::Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

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
