// Pre-tokenizer matchers against the words Hugging Face `tokenizers` (Oniguruma regexes) cuts the
// same texts into, plus hand-picked cases that pin down each regex alternative.
#include "tokenizer/pretokenize.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvmem::tokenizer {
namespace {

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> words;
  PreTokenize(kind, text, &words);
  return {words.begin(), words.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenize, Names) {
  EXPECT_EQ(*PreTokenizerFromName("smollm"), PreTokenizerKind::kSmolLm);
  EXPECT_EQ(*PreTokenizerFromName("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*PreTokenizerFromName("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(*PreTokenizerFromName("gpt2"), PreTokenizerKind::kGpt2);
  EXPECT_EQ(*PreTokenizerFromName("gpt-4o"), PreTokenizerKind::kGpt4o);
  // llama.cpp's fallback, not GPT-2 (a GGUF without tokenizer.ggml.pre reads as "").
  EXPECT_EQ(*PreTokenizerFromName("default"), PreTokenizerKind::kDefault);
  EXPECT_EQ(*PreTokenizerFromName(""), PreTokenizerKind::kDefault);
  const Status unknown = PreTokenizerFromName("no-such-thing").status();
  EXPECT_EQ(unknown.code(), ErrorCode::kUnsupported);
  EXPECT_NE(unknown.ToString().find("'no-such-thing'"), std::string::npos) << unknown.ToString();
  for (auto kind :
       {PreTokenizerKind::kGpt2, PreTokenizerKind::kSmolLm, PreTokenizerKind::kLlama3,
        PreTokenizerKind::kQwen2, PreTokenizerKind::kGpt4o, PreTokenizerKind::kDefault}) {
    EXPECT_EQ(*PreTokenizerFromName(PreTokenizerName(kind)), kind);
  }
}

TEST(PreTokenize, Gpt2Alternatives) {
  const auto k = PreTokenizerKind::kGpt2;
  EXPECT_EQ(Split(k, ""), V{});
  EXPECT_EQ(Split(k, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Split(k, "don't"), (V{"don", "'t"}));
  EXPECT_EQ(Split(k, "DON'T"), (V{"DON", "'", "T"}));  // contractions are case-sensitive
  EXPECT_EQ(Split(k, "a  b"), (V{"a", " ", " b"}));    // \s+(?!\S) leaves the last space
  EXPECT_EQ(Split(k, "a \tb"), (V{"a", " ", "\t", "b"}));
  EXPECT_EQ(Split(k, "x   "), (V{"x", "   "}));  // trailing run stays whole
  EXPECT_EQ(Split(k, "abc123 456"), (V{"abc", "123", " 456"}));
  EXPECT_EQ(Split(k, "a...b !?"), (V{"a", "...", "b", " !?"}));
}

TEST(PreTokenize, SmolLmIsolatesDigits) {
  const auto k = PreTokenizerKind::kSmolLm;
  EXPECT_EQ(Split(k, "abc123 456"), (V{"abc", "1", "2", "3", " ", "4", "5", "6"}));
  EXPECT_EQ(Split(k, "3.14"), (V{"3", ".", "1", "4"}));
  EXPECT_EQ(Split(k, "\xD9\xA1\xD9\xA2"), (V{"\xD9\xA1", "\xD9\xA2"}));  // Arabic-Indic digits
}

TEST(PreTokenize, Llama3Alternatives) {
  const auto k = PreTokenizerKind::kLlama3;
  EXPECT_EQ(Split(k, "DON'T"), (V{"DON", "'T"}));  // case-insensitive contractions
  EXPECT_EQ(Split(k, "12345"), (V{"123", "45"}));
  EXPECT_EQ(Split(k, "(hello"), (V{"(hello"}));  // one non-letter may lead a word
  EXPECT_EQ(Split(k, "\thello"), (V{"\thello"}));
  EXPECT_EQ(Split(k, "\nhello"), (V{"\n", "hello"}));  // but not CR/LF
  EXPECT_EQ(Split(k, "a ...\n\nb"), (V{"a", " ...\n\n", "b"}));
  EXPECT_EQ(Split(k, "a \n  b"), (V{"a", " \n", " ", " b"}));
  EXPECT_EQ(Split(k, "x\n \n"), (V{"x", "\n \n"}));
}

TEST(PreTokenize, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "x12345"), (V{"x", "1", "2", "3", "4", "5"}));
}

TEST(PreTokenize, O200kAlternatives) {
  const auto k = PreTokenizerKind::kGpt4o;
  EXPECT_EQ(Split(k, "HelloWorld"), (V{"Hello", "World"}));    // a word is Upper*lower+
  EXPECT_EQ(Split(k, "HTTPServer"), (V{"HTTPServer"}));        // ... backtracking into Upper*
  EXPECT_EQ(Split(k, "ABC def"), (V{"ABC", " def"}));          // or Upper+lower*
  EXPECT_EQ(Split(k, "don't DON'T"), (V{"don't", " DON'T"}));  // contraction joins the word
  EXPECT_EQ(Split(k, "'s"), (V{"'s"}));
  EXPECT_EQ(Split(k, "12345"), (V{"123", "45"}));
  EXPECT_EQ(Split(k, "a/b//\n/c"), (V{"a", "/b", "//\n/", "c"}));  // [\r\n/]* after punctuation
  // A combining mark is both "upper" and "lower": e + U+0301 stays one word.
  EXPECT_EQ(Split(k, "e\xCC\x81t\xCC\x81"), (V{"e\xCC\x81t\xCC\x81"}));
  EXPECT_EQ(Split(k, "x \n\n y"), (V{"x", " \n\n", " y"}));
}

TEST(PreTokenize, DefaultPipeline) {
  const auto k = PreTokenizerKind::kDefault;
  // Punctuation runs first: "Hello," would be one GPT-2 word " ,"... here "," stands alone.
  EXPECT_EQ(Split(k, "Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(Split(k, "a+=b"), (V{"a", "+=", "b"}));
  // \p{N}+ cuts the space off " 42"; ASCII digits go in threes.
  EXPECT_EQ(Split(k, "x 1234567"), (V{"x", " ", "123", "456", "7"}));
  EXPECT_EQ(Split(k, "don't"), (V{"don", "'", "t"}));  // ' is \p{P}, cut before GPT-2's 't
}

TEST(PreTokenize, MatchesHuggingFaceSplits) {
  const auto vectors = testing::LoadVectors("pretok_vectors.json");
  const auto& splits = vectors["splits"];
  const auto texts = splits["texts"].get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), 250u);
  for (const auto& [name, all_pieces] : splits["pieces"].items()) {
    const PreTokenizerKind kind = *PreTokenizerFromName(name);
    ASSERT_EQ(all_pieces.size(), texts.size());
    int passed = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto expected = all_pieces[i].get<V>();
      const V got = Split(kind, texts[i]);
      EXPECT_EQ(got, expected) << name << " case " << i;
      passed += got == expected;
    }
    RecordProperty(name + "_passed", passed);
  }
}

// Any bytes: words are non-empty and concatenate back to the input.
TEST(PreTokenize, ArbitraryBytesPartitionTheInput) {
  std::mt19937 rng(11);
  for (auto kind :
       {PreTokenizerKind::kGpt2, PreTokenizerKind::kSmolLm, PreTokenizerKind::kLlama3,
        PreTokenizerKind::kQwen2, PreTokenizerKind::kGpt4o, PreTokenizerKind::kDefault}) {
    for (int iter = 0; iter < 500; ++iter) {
      std::string text(rng() % 64, '\0');
      for (char& c : text) c = static_cast<char>(rng() % 256);
      std::vector<std::string_view> words;
      PreTokenize(kind, text, &words);
      std::string joined;
      for (std::string_view w : words) {
        EXPECT_FALSE(w.empty());
        joined.append(w);
      }
      EXPECT_EQ(joined, text);
    }
  }
}

}  // namespace
}  // namespace kvmem::tokenizer
