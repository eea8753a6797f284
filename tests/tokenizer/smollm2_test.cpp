// The real SmolLM2 tokenizer (read from its GGUF) against golden ids from Hugging Face
// `tokenizers` (cross-checked with llama.cpp when generated): scripts/make_tokenizer_vectors.py.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvmem::tokenizer {
namespace {

using testing::Escaped;
using testing::LoadVectors;

TEST(SmolLm2, ConfigFromGguf) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  EXPECT_EQ(tok->model(), Tokenizer::Model::kBpe);
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizerKind::kSmolLm);
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->architecture(), "llama");
  EXPECT_NE(tok->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(tok->FindToken("<|im_start|>"), 1);
  // <|im_end|> (= eos) and <|endoftext|> end generation; <|im_start|> does not.
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
  EXPECT_TRUE(tok->IsEndOfGeneration(0));
  EXPECT_FALSE(tok->IsEndOfGeneration(1));
}

TEST(SmolLm2, MatchesHuggingFaceVectors) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  const auto vectors = LoadVectors("smollm2_vectors.json");
  ASSERT_GT(vectors["cases"].size(), 300u);
  int passed = 0;
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_plain = c["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->Encode(text, /*add_special=*/true, /*parse_special=*/true), ids)
        << "text: " << Escaped(text);
    EXPECT_EQ(tok->Encode(text, true, /*parse_special=*/false), ids_plain)
        << "text (no special): " << Escaped(text);
    passed += tok->Encode(text, true, true) == ids && tok->Encode(text, true, false) == ids_plain;
  }
  RecordProperty("vectors_passed", passed);
}

TEST(SmolLm2, RoundTrip) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  const auto vectors = LoadVectors("smollm2_vectors.json");
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    // Plain text: every byte comes back.
    auto decoded = tok->Decode(tok->Encode(text, true, false));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text) << Escaped(text);
    // Parsed specials come back when rendered, and vanish otherwise.
    auto with_special = tok->Decode(tok->Encode(text, true, true), /*render_special=*/true);
    ASSERT_TRUE(with_special.ok());
    EXPECT_EQ(*with_special, text) << Escaped(text);
  }
}

TEST(SmolLm2, SpecialTokens) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const auto parsed = tok->Encode(text, true, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  for (int32_t id : tok->Encode(text, true, false)) {
    EXPECT_NE(id, 1);
    EXPECT_NE(id, 2);
  }
  auto hidden = tok->Decode(parsed, /*render_special=*/false);
  ASSERT_TRUE(hidden.ok());
  EXPECT_EQ(*hidden, "user\nhi");
}

TEST(SmolLm2, InvalidUtf8RoundTrips) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  // SmolLM2's vocabulary lacks tokens for some bytes (0xF5..0xFF never occur in UTF-8, and a few
  // control bytes); those encode as unk. Every other byte sequence must round-trip.
  std::vector<char> known;
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &text);
    if (tok->FindToken(text) >= 0) known.push_back(static_cast<char>(b));
  }
  EXPECT_GE(known.size(), 230u);
  EXPECT_EQ(tok->Encode("\xFF", false, false), std::vector<int32_t>{tok->unk_id()});
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string bytes(rng() % 40, '\0');
    for (char& b : bytes) b = known[rng() % known.size()];
    auto decoded = tok->Decode(tok->Encode(bytes, true, true), true);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, bytes) << Escaped(bytes);
  }
}

TEST(SmolLm2, StreamingDecoderHoldsSplitCharacters) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  // Characters that byte-level BPE splits into several tokens.
  const std::string text =
      "emoji \xF0\x9F\xA4\x97 and \xE6\x97\xA5\xE6\x9C\xAC and \xF0\x9F\x98\x80!";
  const auto ids = tok->Encode(text, false, false);
  StreamingDecoder stream(tok);
  std::string out;
  for (int32_t id : ids) {
    auto chunk = stream.Push(id);
    ASSERT_TRUE(chunk.ok());
    // Every chunk is whole UTF-8.
    size_t pos = 0;
    while (pos < chunk->size()) {
      const Utf8Char c = DecodeUtf8(*chunk, pos);
      EXPECT_TRUE(c.valid) << Escaped(*chunk);
      pos += c.len;
    }
    out += *chunk;
  }
  out += stream.Flush();
  EXPECT_EQ(out, text);
  EXPECT_FALSE(stream.Push(tok->vocab_size()).ok());
}

TEST(SmolLm2, PreTokenizerVariantsMatchHuggingFace) {
  const auto vectors = LoadVectors("pretok_vectors.json");
  for (const auto& [pre, variant] : vectors["variants"].items()) {
    auto tok = testing::SmolLm2WithPre(pre);
    if (tok == nullptr) GTEST_SKIP() << testing::SmolLm2Path() << " not present";
    int passed = 0;
    for (const auto& c : variant["cases"]) {
      const std::string text = c["text"];
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      const auto got = tok->Encode(text, false, true);
      EXPECT_EQ(got, ids) << pre << " text: " << Escaped(text);
      passed += got == ids;
    }
    RecordProperty(pre + "_passed", passed);
  }
}

TEST(SmolLm2, EncodesTwentyThousandTokensQuickly) {
  KVMEM_REQUIRE_SMOLLM2(tok);
  std::string text;
  const auto vectors = LoadVectors("smollm2_vectors.json");
  while (text.size() < 80000) {
    for (const auto& c : vectors["cases"]) text += c["text"].get<std::string>();
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok->Encode(text, false, true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(ids.size(), 20000u);
  // Well under a second even in the sanitizer build.
  EXPECT_LT(seconds, 1.0) << ids.size() << " tokens";
  RecordProperty("tokens", static_cast<int>(ids.size()));
  RecordProperty("encode_ms", static_cast<int>(seconds * 1000));
}

}  // namespace
}  // namespace kvmem::tokenizer
