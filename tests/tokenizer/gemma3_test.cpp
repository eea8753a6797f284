// The real Gemma-3 tokenizer (SentencePiece BPE, 262,144 pieces, read from the gemma-3-270m GGUF)
// against golden ids from transformers' GGUF tokenizer converter, cross-checked with llama.cpp
// when generated (scripts/make_tokenizer_vectors.py --only gemma3). Skipped without the optional
// model (scripts/install_deps.sh --model gemma3-270m).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer {
namespace {

using testing::Escaped;
using testing::LoadVectors;

constexpr int32_t kBos = 2, kEos = 1, kStartOfTurn = 105, kEndOfTurn = 106;

TEST(Gemma3, ConfigFromGguf) {
  KVMEM_REQUIRE_GEMMA3(tok);
  EXPECT_EQ(tok->model(), Tokenizer::Model::kSpm);
  EXPECT_EQ(tok->vocab_size(), 262144);
  EXPECT_EQ(tok->bos_id(), kBos);
  EXPECT_EQ(tok->eos_id(), kEos);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->architecture(), "gemma3");
  EXPECT_EQ(tok->FindToken("<start_of_turn>"), kStartOfTurn);
  EXPECT_EQ(tok->FindToken("<end_of_turn>"), kEndOfTurn);
  EXPECT_TRUE(tok->IsEndOfGeneration(kEos));
  EXPECT_TRUE(tok->IsEndOfGeneration(kEndOfTurn));
  EXPECT_FALSE(tok->IsEndOfGeneration(kStartOfTurn));
  EXPECT_FALSE(tok->IsEndOfGeneration(kBos));
}

TEST(Gemma3, MatchesTransformersVectors) {
  KVMEM_REQUIRE_GEMMA3(tok);
  const auto vectors = LoadVectors("gemma3_vectors.json");
  ASSERT_GT(vectors["cases"].size(), 300u);
  int passed = 0;
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_plain = c["ids_no_special"].get<std::vector<int32_t>>();
    const auto got = tok->Encode(text, /*add_special=*/true, /*parse_special=*/true);
    const auto got_plain = tok->Encode(text, true, /*parse_special=*/false);
    EXPECT_EQ(got, ids) << "text: " << Escaped(text);
    EXPECT_EQ(got_plain, ids_plain) << "text (no special): " << Escaped(text);
    passed += got == ids && got_plain == ids_plain;
  }
  RecordProperty("vectors_passed", passed);
}

TEST(Gemma3, RoundTrip) {
  KVMEM_REQUIRE_GEMMA3(tok);
  const auto vectors = LoadVectors("gemma3_vectors.json");
  for (const auto& c : vectors["cases"]) {
    const std::string text = c["text"];
    // Byte fallback covers every byte, so plain text comes back unchanged.
    auto decoded = tok->Decode(tok->Encode(text, /*add_special=*/false, false));
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text) << Escaped(text);
    auto with_special = tok->Decode(tok->Encode(text, false, true), /*render_special=*/true);
    ASSERT_TRUE(with_special.ok());
    EXPECT_EQ(*with_special, text) << Escaped(text);
  }
}

TEST(Gemma3, ChatPromptByArchitecture) {
  KVMEM_REQUIRE_GEMMA3(tok);
  // The 270M GGUF carries no tokenizer.chat_template: the architecture picks Gemma's format.
  EXPECT_TRUE(tok->chat_template().empty());
  auto tmpl = DetectChatTemplate(tok->chat_template(), tok->architecture());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  EXPECT_EQ(tmpl->kind, ChatTemplateKind::kGemma);
  const std::vector<ChatMessage> msgs = {{"user", "Write a haiku about memory."}};
  auto text = RenderChat(*tmpl, msgs, /*add_generation_prompt=*/true);
  ASSERT_TRUE(text.ok());
  // The ids transformers and llama.cpp give this prompt (gemma3_vectors.json, first Gemma case).
  const std::vector<int32_t> want = {kBos, 105,  2364,   107, 6974, 496, 678,  20517,
                                     1003, 6571, 236761, 106, 107,  105, 4368, 107};
  EXPECT_EQ(tok->Encode(*text, true, true), want) << Escaped(*text);
}

}  // namespace
}  // namespace kvmem::tokenizer
