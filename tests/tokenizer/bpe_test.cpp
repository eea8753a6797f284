// Byte-level BPE and the Tokenizer front end on a tiny hand-made vocabulary (no model needed).
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::string ByteChar(uint8_t b) {
  std::string s;
  AppendUtf8(ByteToUnicode(b), &s);
  return s;
}

// Ids 0..255: the byte alphabet in byte order. Then merged tokens, then special tokens.
TokenizerConfig TinyConfig() {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  for (int b = 0; b < 256; ++b) c.tokens.push_back(ByteChar(static_cast<uint8_t>(b)));
  c.token_types.assign(256, 1);
  auto add = [&](const std::string& text, int32_t type) {
    c.tokens.push_back(text);
    c.token_types.push_back(type);
    return static_cast<int32_t>(c.tokens.size() - 1);
  };
  // 256..: merges' results.
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "aa", "bc", "ab", "hlo"}) {
    add(t, 1);
  }
  c.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "a a", "b c", "a b"};
  add("<s>", 3);         // 265
  add("</s>", 3);        // 266
  add("<a>", 3);         // 267
  add("<a>b", 3);        // 268: longer special sharing a prefix
  add("<u>", 4);         // 269: user-defined, always matched
  add("<|im_end|>", 3);  // 270
  c.bos_id = 265;
  c.eos_id = 266;
  return c;
}

Tokenizer Make(TokenizerConfig c) {
  auto t = Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

int32_t Byte(char c) { return static_cast<uint8_t>(c); }

TEST(Bpe, MergesByRankLeftmostFirst) {
  const Tokenizer t = Make(TinyConfig());
  EXPECT_EQ(t.Encode("hello", false), (Ids{259}));
  EXPECT_EQ(t.Encode("hello world", false),
            (Ids{259, 260, Byte('o'), Byte('r'), Byte('l'), Byte('d')}));
  EXPECT_EQ(t.Encode("aaa", false), (Ids{261, Byte('a')}));  // tie: leftmost pair first
  EXPECT_EQ(t.Encode("aaaa", false), (Ids{261, 261}));
  EXPECT_EQ(t.Encode("abc", false), (Ids{Byte('a'), 262}));  // "b c" outranks "a b"
  EXPECT_EQ(t.Encode("hlo", false), (Ids{Byte('h'), Byte('l'), Byte('o')}));
  EXPECT_EQ(t.Encode("", false), Ids{});
}

TEST(Bpe, IgnoreMergesTakesWholeWords) {
  TokenizerConfig c = TinyConfig();
  c.pre = "llama-bpe";
  const Tokenizer t = Make(std::move(c));
  EXPECT_EQ(t.Encode("hlo", false), (Ids{264}));
  EXPECT_EQ(t.Encode("hello", false), (Ids{259}));
}

TEST(Bpe, SpecialTokens) {
  const Tokenizer t = Make(TinyConfig());
  // Longest match among control tokens, only when parsing specials.
  EXPECT_EQ(t.Encode("<a>bc", false, true), (Ids{268, Byte('c')}));
  EXPECT_EQ(t.Encode("<a>c", false, true), (Ids{267, Byte('c')}));
  EXPECT_EQ(t.Encode("x<s>", false, true), (Ids{Byte('x'), 265}));
  const Ids plain = t.Encode("<a>c", false, false);
  EXPECT_EQ(plain, (Ids{Byte('<'), Byte('a'), Byte('>'), Byte('c')}));
  // User-defined tokens are matched either way.
  EXPECT_EQ(t.Encode("<u>", false, false), (Ids{269}));
  EXPECT_EQ(t.Encode("<u>", false, true), (Ids{269}));
  // Text around a special token is pre-tokenized on its own.
  EXPECT_EQ(t.Encode("he<s>llo", false, true), (Ids{256, 265, 257, Byte('o')}));
}

TEST(Bpe, AddBosAndEos) {
  TokenizerConfig c = TinyConfig();
  c.add_bos = true;
  c.add_eos = true;
  const Tokenizer t = Make(std::move(c));
  EXPECT_EQ(t.Encode("hello"), (Ids{265, 259, 266}));
  EXPECT_EQ(t.Encode("hello", /*add_special=*/false), (Ids{259}));
  EXPECT_EQ(t.Encode(""), (Ids{265, 266}));
}

TEST(Bpe, Decode) {
  const Tokenizer t = Make(TinyConfig());
  const Ids ids = t.Encode("<s>hello <u>\n", false, true);
  EXPECT_EQ(*t.Decode(ids), "hello <u>\n");
  EXPECT_EQ(*t.Decode(ids, /*render_special=*/true), "<s>hello <u>\n");
  EXPECT_EQ(t.TokenToPiece(260), " w");
  EXPECT_EQ(t.TokenToPiece(265), "");
  EXPECT_EQ(t.TokenToPiece(265, true), "<s>");
  EXPECT_EQ(t.Decode(Ids{1000}).status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(t.Decode(Ids{-1}).status().code(), ErrorCode::kOutOfRange);
}

TEST(Bpe, EndOfGeneration) {
  TokenizerConfig c = TinyConfig();
  c.eot_id = 267;
  const Tokenizer t = Make(std::move(c));
  EXPECT_EQ(t.end_of_generation_ids(), (Ids{266, 267, 270}));
  EXPECT_TRUE(t.IsEndOfGeneration(270));
  EXPECT_FALSE(t.IsEndOfGeneration(265));
}

TEST(Bpe, StreamingDecoderJoinsSplitCharacter) {
  const Tokenizer t = Make(TinyConfig());
  const std::string text = "\xE4\xB8\xAD!";  // 中 is three byte tokens here
  const Ids ids = t.Encode(text, false);
  ASSERT_EQ(ids.size(), 4u);
  StreamingDecoder stream(&t);
  EXPECT_EQ(*stream.Push(ids[0]), "");
  EXPECT_EQ(*stream.Push(ids[1]), "");
  EXPECT_EQ(*stream.Push(ids[2]), "\xE4\xB8\xAD");
  EXPECT_EQ(*stream.Push(ids[3]), "!");
  EXPECT_EQ(*stream.Push(ids[0]), "");
  EXPECT_EQ(stream.Flush(), "\xE4");  // an unfinished character comes out at the end
  EXPECT_EQ(stream.Flush(), "");
}

TEST(Bpe, CreateRejectsBadConfigs) {
  auto code = [](TokenizerConfig c) { return Tokenizer::Create(std::move(c)).status().code(); };
  TokenizerConfig c = TinyConfig();
  c.model = "bert";
  EXPECT_EQ(code(c), ErrorCode::kUnsupported);
  c = TinyConfig();
  c.pre = "martian";
  EXPECT_EQ(code(c), ErrorCode::kUnsupported);
  c = TinyConfig();
  c.merges.push_back("x yz");  // "yz" is not a token
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
  c = TinyConfig();
  c.merges.push_back("nospace");
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
  c = TinyConfig();
  c.bos_id = 100000;
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
  c = TinyConfig();
  c.token_types.pop_back();
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
  c = TinyConfig();
  c.token_types[3] = 42;
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
  c = TinyConfig();
  c.tokens.clear();
  c.token_types.clear();
  EXPECT_EQ(code(c), ErrorCode::kInvalidArgument);
  c = TinyConfig();
  c.bos_id = -1;
  c.add_bos = true;
  EXPECT_EQ(code(c), ErrorCode::kCorrupt);
}

TEST(Bpe, DecodeByteLevel) {
  EXPECT_EQ(BpeModel::DecodeByteLevel("\xC4\xA0hello\xC4\x8A"), " hello\n");
  EXPECT_EQ(BpeModel::DecodeByteLevel("\xE4\xB8\xAD"), "\xE4\xB8\xAD");  // outside the alphabet
}

}  // namespace
}  // namespace kvmem::tokenizer
