// WordPiece tokenizer: rules on a hand-made vocabulary, and token ids / normalized text against
// Hugging Face `tokenizers` (goldens from scripts/make_embed_goldens.py).
#include "memory/embed/wordpiece.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "embed_test_util.h"
#include "memory/embed/bert_unicode.h"
#include "tokenizer/unicode.h"

namespace kvmem::memory::embed {
namespace {

using testing::LoadJson;

WordPieceTokenizer Small(WordPieceConfig config = {}) {
  std::vector<std::string> vocab = {"[PAD]", "[UNK]",  "[CLS]", "[SEP]", "[MASK]", "un",
                                    "##aff", "##able", "aff",   "hello", "world",  ",",
                                    "!",     "##s",    "cafe",  "a",     "##b",    "東"};
  auto t = WordPieceTokenizer::Create(std::move(vocab), std::move(config));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(WordPieceTest, GreedyLongestMatchWithContinuationPieces) {
  const WordPieceTokenizer t = Small();
  EXPECT_EQ(t.Encode("unaffable", 64), (std::vector<int32_t>{2, 5, 6, 7, 3}));
  EXPECT_EQ(t.Encode("Hello, World!", 64), (std::vector<int32_t>{2, 9, 11, 10, 12, 3}));
  EXPECT_EQ(t.Encode("worlds abb", 64), (std::vector<int32_t>{2, 10, 13, 15, 16, 16, 3}));
  // No piece for a suffix: the whole word is [UNK], not a prefix of pieces.
  EXPECT_EQ(t.Encode("unaffx hello", 64), (std::vector<int32_t>{2, 1, 9, 3}));
  EXPECT_EQ(t.Encode("", 64), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t.Encode(" \t\n ", 64), (std::vector<int32_t>{2, 3}));
}

TEST(WordPieceTest, NormalizesLikeBert) {
  const WordPieceTokenizer t = Small();
  EXPECT_EQ(t.Normalize("Café\tÅ\u00a0x"), "cafe a x");
  EXPECT_EQ(t.Normalize("a\u200bb\x01"
                        "c"),
            "abc");                            // Cf and Cc dropped
  EXPECT_EQ(t.Normalize("東京"), " 東  京 ");  // CJK ideographs isolated
  EXPECT_EQ(t.Encode("CAFÉ!東", 64), (std::vector<int32_t>{2, 14, 12, 17, 3}));
  // Invalid UTF-8 decodes to U+FFFD, which clean_text drops.
  EXPECT_EQ(t.Encode("hel\xfflo", 64), (std::vector<int32_t>{2, 9, 3}));
  WordPieceConfig cased;
  cased.lowercase = cased.strip_accents = false;
  EXPECT_EQ(Small(cased).Normalize("Café"), "Café");
}

TEST(WordPieceTest, LongWordsAreUnknown) {
  WordPieceConfig config;
  config.max_input_chars_per_word = 5;
  const WordPieceTokenizer t = Small(config);
  EXPECT_EQ(t.Encode("hello", 64), (std::vector<int32_t>{2, 9, 3}));
  EXPECT_EQ(t.Encode("helloo", 64), (std::vector<int32_t>{2, 1, 3}));
}

TEST(WordPieceTest, AddedTokensMatchInRawText) {
  const WordPieceTokenizer t = Small();
  EXPECT_EQ(t.Encode("hello[MASK]world", 64), (std::vector<int32_t>{2, 9, 4, 10, 3}));
  EXPECT_EQ(t.Encode("[CLS][SEP]", 64), (std::vector<int32_t>{2, 2, 3, 3}));
  // Lowercase or incomplete forms are ordinary text (punctuation and words).
  EXPECT_EQ(t.Encode("[mask]", 64), (std::vector<int32_t>{2, 1, 1, 1, 3}));
}

TEST(WordPieceTest, TruncatesToMaxLen) {
  const WordPieceTokenizer t = Small();
  EXPECT_EQ(t.Encode("hello world hello", 4), (std::vector<int32_t>{2, 9, 10, 3}));
  EXPECT_EQ(t.Encode("unaffable", 3), (std::vector<int32_t>{2, 5, 3}));
  EXPECT_EQ(t.Encode("[MASK] hello", 3), (std::vector<int32_t>{2, 4, 3}));
  EXPECT_EQ(t.Encode("hello", 2), (std::vector<int32_t>{2, 3}));
}

TEST(WordPieceTest, VocabTxtWithoutOptionalAddedTokens) {
  auto t = WordPieceTokenizer::FromVocabTxt("[UNK]\n[CLS]\r\n[SEP]\nhello\n", WordPieceConfig{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->vocab_size(), 4);
  EXPECT_EQ(t->Encode("Hello [MASK]", 64), (std::vector<int32_t>{1, 3, 0, 0, 0, 2}));
}

TEST(WordPieceTest, RejectsVocabularyWithoutSpecialTokens) {
  auto t = WordPieceTokenizer::Create({"a", "b"}, WordPieceConfig{});
  EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("[UNK]"), std::string::npos);
}

TEST(BertUnicodeTest, NfdDecomposesAndOrders) {
  std::vector<uint32_t> out;
  const uint32_t hangul[] = {0xD55C};  // 한 = ᄒ ᅡ ᆫ
  AppendNfd(hangul, hangul + 1, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{0x1112, 0x1161, 0x11AB}));
  out.clear();
  const uint32_t marks[] = {'a', 0x0301, 0x0323};  // acute (230) after dot below (220)
  AppendNfd(marks, marks + 3, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{'a', 0x0323, 0x0301}));
  out.clear();
  const uint32_t nested[] = {0x1E69};  // ṩ -> s + dot below + dot above
  AppendNfd(nested, nested + 1, &out);
  EXPECT_EQ(out, (std::vector<uint32_t>{'s', 0x0323, 0x0307}));
  out.clear();
  AppendLowercase(0x130, &out);  // İ -> i + combining dot above
  EXPECT_EQ(out, (std::vector<uint32_t>{'i', 0x0307}));
}

// Every code point of the golden's blocks, joined by spaces, normalized by Hugging Face's
// BertNormalizer (the same settings as all-MiniLM-L6-v2's, which the tiny model shares) and
// split into words by its BertPreTokenizer.
TEST(WordPieceGoldenTest, NormalizerMatchesHuggingFace) {
  auto t = WordPieceTokenizer::FromTokenizerJson(
      testing::ReadAll(testing::TinyModelDir() + "/tokenizer.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const nlohmann::json golden = LoadJson("bert_normalize.json");
  ASSERT_GT(golden["blocks"].size(), 10u);
  // Code points where Unicode versions differ between our tables and tokenizers' (the golden
  // script says which and why).
  const std::vector<uint32_t> skip = golden["skip"].get<std::vector<uint32_t>>();
  auto skipped = [&](uint32_t cp) {
    return (cp >= 0xD800 && cp <= 0xDFFF) || std::find(skip.begin(), skip.end(), cp) != skip.end();
  };
  int checked = 0;
  for (const auto& block : golden["blocks"]) {
    const uint32_t first = block["first"].get<uint32_t>(), last = block["last"].get<uint32_t>();
    std::string text;
    for (uint32_t cp = first; cp <= last; ++cp) {
      if (skipped(cp)) continue;
      if (!text.empty()) text += ' ';
      tokenizer::AppendUtf8(cp, &text);
    }
    std::string words;
    for (const std::string& w : t->Words(text)) words += (words.empty() ? "" : " ") + w;
    EXPECT_EQ(words, block["words"].get<std::string>())
        << "pre-tokenized block " << std::hex << first << ".." << last;
    const std::string want = block["normalized"].get<std::string>();
    const std::string got = t->Normalize(text);
    if (got != want) {
      // The first code point whose own normalization is not in the reference, for the message.
      uint32_t suspect = 0;
      for (uint32_t cp = first; cp <= last && suspect == 0; ++cp) {
        if (skipped(cp)) continue;
        std::string one;
        tokenizer::AppendUtf8(cp, &one);
        if (want.find(t->Normalize(one)) == std::string::npos) suspect = cp;
      }
      ADD_FAILURE() << "block " << std::hex << first << ".." << last << ": differs (first suspect "
                    << "U+" << suspect << ")";
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(golden["blocks"].size()));
}

TEST(WordPieceGoldenTest, TinyTokenizerMatchesSentenceTransformers) {
  auto enc = SentenceEncoder::Load(testing::TinyModelDir());
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  const nlohmann::json tiny = LoadJson("tiny_embed.json");  // outlives the loop
  for (const auto& c : tiny["cases"]) {
    EXPECT_EQ(enc->Tokenize(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>())
        << c["text"];
  }
}

TEST(WordPieceGoldenTest, MiniLmIdsMatchHuggingFace) {
  KVMEM_REQUIRE_MINILM(enc);
  const nlohmann::json golden = LoadJson("minilm_tokens.json");
  ASSERT_EQ(golden["max_len"].get<int>(), enc->max_seq_length());
  int n = 0;
  for (const auto& c : golden["cases"]) {
    EXPECT_EQ(enc->Tokenize(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>())
        << c["text"];
    ++n;
  }
  EXPECT_GE(n, 20);
  const nlohmann::json embed = LoadJson("minilm_embed.json");  // outlives the loop
  for (const auto& c : embed["cases"]) {
    EXPECT_EQ(enc->Tokenize(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>())
        << c["text"];
  }
}

// vocab.txt (the fallback without tokenizer.json) gives the same ids as tokenizer.json.
TEST(WordPieceGoldenTest, MiniLmVocabTxtAgreesWithTokenizerJson) {
  KVMEM_REQUIRE_MINILM(enc);
  auto t = WordPieceTokenizer::FromVocabTxt(
      testing::ReadAll((testing::MiniLmDir() / "vocab.txt").string()), WordPieceConfig{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const nlohmann::json tokens = LoadJson("minilm_tokens.json");  // outlives the loop
  for (const auto& c : tokens["cases"]) {
    EXPECT_EQ(t->Encode(c["text"].get<std::string>(), 256), c["ids"].get<std::vector<int32_t>>())
        << c["text"];
  }
}

}  // namespace
}  // namespace kvmem::memory::embed
