// SentencePiece BPE ("llama" tokenizer model, as Gemma uses) against the `sentencepiece` library
// on a small model trained by scripts/make_tokenizer_vectors.py, plus hand-made vocabularies.
#include "tokenizer/spm.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

TokenizerConfig ConfigFromVectors(const nlohmann::json& v, bool add_space_prefix) {
  TokenizerConfig c;
  c.model = "llama";
  c.tokens = v["tokens"].get<std::vector<std::string>>();
  c.scores = v["scores"].get<std::vector<float>>();
  c.token_types = v["token_types"].get<std::vector<int32_t>>();
  c.unk_id = v["unk_id"];
  c.bos_id = v["bos_id"];
  c.eos_id = v["eos_id"];
  c.pad_id = v["pad_id"];
  c.add_space_prefix = add_space_prefix;
  return c;
}

TEST(Spm, MatchesSentencePiece) {
  const auto v = testing::LoadVectors("spm_vectors.json");
  ASSERT_TRUE(v.contains("tokens"));
  auto plain = Tokenizer::Create(ConfigFromVectors(v, false));
  auto prefixed = Tokenizer::Create(ConfigFromVectors(v, true));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(prefixed.ok()) << prefixed.status().ToString();
  int passed = 0, total = 0;
  for (const auto& c : v["cases"]) {
    const std::string text = c["text"];
    const Ids ids = c["ids"].get<Ids>();
    const Ids got = plain->Encode(text, false, false);
    EXPECT_EQ(got, ids) << text;
    EXPECT_EQ(*plain->Decode(ids), c["decoded"].get<std::string>()) << text;
    passed += got == ids;
    ++total;
    if (c.contains("ids_space_prefix")) {
      const Ids expected = c["ids_space_prefix"].get<Ids>();
      const Ids got_prefixed = prefixed->Encode(text, false, false);
      EXPECT_EQ(got_prefixed, expected) << "with space prefix: " << text;
      // The decoder drops the space the encoder added.
      EXPECT_EQ(*prefixed->Decode(expected), c["decoded"].get<std::string>()) << text;
      passed += got_prefixed == expected;
      ++total;
    }
  }
  RecordProperty("vectors_passed", passed);
  EXPECT_EQ(passed, total);
}

TEST(Spm, BosAndSpecials) {
  const auto v = testing::LoadVectors("spm_vectors.json");
  TokenizerConfig config = ConfigFromVectors(v, true);
  config.add_bos = true;
  auto t = Tokenizer::Create(std::move(config));
  ASSERT_TRUE(t.ok());
  const int32_t sot = t->FindToken("<start_of_turn>");
  ASSERT_GE(sot, 0);
  const Ids ids = t->Encode("<start_of_turn>user", true, false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], t->bos_id());
  EXPECT_EQ(ids[1], sot);  // user-defined: matched even without parse_special
  // Control tokens only with parse_special.
  EXPECT_EQ(t->Encode("</s>", false, true), (Ids{t->eos_id()}));
  EXPECT_NE(t->Encode("</s>", false, false), (Ids{t->eos_id()}));
  EXPECT_EQ(*t->Decode(t->Encode("hello there", true, false)), "hello there");
  EXPECT_EQ(t->Encode("", true, false), (Ids{t->bos_id()}));
}

// Hand-made vocabulary: ids 0..2 specials, then pieces with scores.
struct Piece {
  const char* text;
  float score;
  int32_t type;
};

Tokenizer MakeSpm(std::vector<Piece> pieces) {
  TokenizerConfig c;
  c.model = "llama";
  for (const Piece& p : std::vector<Piece>{{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}}) {
    c.tokens.push_back(p.text);
    c.scores.push_back(p.score);
    c.token_types.push_back(p.type);
  }
  for (const Piece& p : pieces) {
    c.tokens.push_back(p.text);
    c.scores.push_back(p.score);
    c.token_types.push_back(p.type);
  }
  c.unk_id = 0;
  c.bos_id = 1;
  c.eos_id = 2;
  auto t = Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(Spm, HighestScoreMergesFirst) {
  const Tokenizer t = MakeSpm({{"a", -10, 1},               // 3
                               {"b", -10, 1},               // 4
                               {"c", -10, 1},               // 5
                               {"ab", -1, 1},               // 6
                               {"bc", -0.5, 1},             // 7
                               {"abc", -2, 1},              // 8
                               {"\xE2\x96\x81", -10, 1}});  // 9 '▁'
  EXPECT_EQ(t.Encode("abc", false), (Ids{8}));              // a + bc, then abc
  EXPECT_EQ(t.Encode("abab", false), (Ids{6, 6}));
  EXPECT_EQ(t.Encode("bcbc", false), (Ids{7, 7}));
  EXPECT_EQ(t.Encode("a b", false), (Ids{3, 9, 4}));
  // No byte tokens: an unknown character becomes unk, and decodes to nothing.
  EXPECT_EQ(t.Encode("a\xE4\xB8\xAD", false), (Ids{3, 0}));
  EXPECT_EQ(*t.Decode(Ids{3, 9, 4}), "a b");
}

TEST(Spm, UnusedPiecesAreSplitBack) {
  const Tokenizer t = MakeSpm({{"a", -10, 1},
                               {"b", -10, 1},
                               {"c", -10, 1},
                               {"bc", -0.5, 5},   // 6: unused
                               {"abc", -2, 1}});  // 7
  EXPECT_EQ(t.Encode("bc", false), (Ids{4, 5}));
  EXPECT_EQ(t.Encode("abc", false), (Ids{7}));  // the unused piece can still be merged through
}

TEST(Spm, ControlPiecesAreNeverMerged) {
  const Tokenizer t = MakeSpm({{"<", -10, 1}, {"s", -10, 1}, {">", -10, 1}, {"<s", -1, 1}});
  // "<s>" is a control token: merging "<s" + ">" into it is not allowed.
  EXPECT_EQ(t.Encode("<s>", false, false), (Ids{6, 5}));
  EXPECT_EQ(t.Encode("<s>", false, true), (Ids{1}));
}

TEST(Spm, ByteFallback) {
  std::vector<Piece> pieces = {{"a", -1, 1}};
  std::vector<std::string> names;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    names.push_back(buf);
  }
  for (const std::string& n : names) pieces.push_back({n.c_str(), 0, 6});
  const Tokenizer t = MakeSpm(pieces);
  const int32_t first_byte = 4;
  const Ids ids = t.Encode("a\xE4\xB8\xAD", false);
  EXPECT_EQ(ids, (Ids{3, first_byte + 0xE4, first_byte + 0xB8, first_byte + 0xAD}));
  EXPECT_EQ(*t.Decode(ids), "a\xE4\xB8\xAD");
  // Invalid UTF-8 falls back to bytes too, and round-trips.
  EXPECT_EQ(*t.Decode(t.Encode("\xFF\x80"
                               "a",
                               false)),
            "\xFF\x80"
            "a");
  EXPECT_EQ(ParseByteToken("<0x0A>"), 0x0A);
  EXPECT_EQ(ParseByteToken("<0xzz>"), -1);
  EXPECT_EQ(ParseByteToken("<0x0A"), -1);
}

}  // namespace
}  // namespace kvmem::tokenizer
