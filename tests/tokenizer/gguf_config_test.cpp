// TokenizerConfigFromGguf on small GGUF files built in memory.
#include "tokenizer/gguf_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../gguf/gguf_test_writer.h"

namespace kvmem::tokenizer {
namespace {

using gguf::GgufFile;
using gguf::ValueType;
using gguf::testing::GgufBuilder;

GgufBuilder SpmFile() {
  GgufBuilder b;
  b.String("general.architecture", "gemma3");
  b.String("tokenizer.ggml.model", "llama");
  b.StringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b"});
  b.ScalarArray<float>("tokenizer.ggml.scores", ValueType::kFloat32, {0, 0, 0, -1, -2, -3});
  b.ScalarArray<int32_t>("tokenizer.ggml.token_type", ValueType::kInt32, {2, 3, 3, 1, 1, 1});
  return b;
}

TEST(GgufConfig, SentencePieceDefaults) {
  const std::vector<uint8_t> bytes = SpmFile().Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto c = TokenizerConfigFromGguf(*file);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model, "llama");
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->tokens.size(), 6u);
  EXPECT_EQ(c->scores.size(), 6u);
  EXPECT_EQ(c->bos_id, 1);
  EXPECT_EQ(c->eos_id, 2);
  EXPECT_EQ(c->unk_id, 0);
  EXPECT_TRUE(c->add_bos);
  EXPECT_TRUE(c->add_space_prefix);
  auto t = LoadTokenizer(*file);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Encode("ab"), (std::vector<int32_t>{1, 3, 4, 5}));
}

TEST(GgufConfig, ExplicitKeysWin) {
  GgufBuilder b = SpmFile();
  b.Scalar<uint32_t>("tokenizer.ggml.bos_token_id", ValueType::kUint32, 2);
  b.Scalar<uint8_t>("tokenizer.ggml.add_bos_token", ValueType::kBool, 0);
  b.Scalar<uint8_t>("tokenizer.ggml.add_space_prefix", ValueType::kBool, 0);
  b.String("tokenizer.chat_template", "<start_of_turn>");
  const std::vector<uint8_t> bytes = b.Build();
  auto file = GgufFile::Parse(bytes);
  ASSERT_TRUE(file.ok());
  auto c = TokenizerConfigFromGguf(*file);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bos_id, 2);
  EXPECT_FALSE(c->add_bos);
  EXPECT_FALSE(c->add_space_prefix);
  EXPECT_EQ(c->chat_template, "<start_of_turn>");
}

GgufBuilder BpeFile(const char* pre) {
  GgufBuilder b;
  b.String("general.architecture", "qwen2");
  b.String("general.name", "Tiny");
  b.String("tokenizer.ggml.model", "gpt2");
  if (pre != nullptr) b.String("tokenizer.ggml.pre", pre);
  b.StringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  b.StringArray("tokenizer.ggml.merges", {"a b"});
  return b;
}

TEST(GgufConfig, PreTokenizerTypes) {
  // No tokenizer.ggml.pre, or "default": llama.cpp's fallback pre-tokenizer, never GPT-2's.
  for (const char* pre : {static_cast<const char*>(nullptr), "default"}) {
    const auto bytes = BpeFile(pre).Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    auto t = LoadTokenizer(*file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->pre_tokenizer(), PreTokenizerKind::kDefault);
  }
  {
    const auto bytes = BpeFile("gpt-4o").Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    auto c = TokenizerConfigFromGguf(*file);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->name, "Tiny");
    auto t = LoadTokenizer(*file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->pre_tokenizer(), PreTokenizerKind::kGpt4o);
  }
  {
    // An unknown type is refused, naming it.
    const auto bytes = BpeFile("tekken").Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    auto t = LoadTokenizer(*file);
    EXPECT_EQ(t.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(t.status().ToString().find("'tekken'"), std::string::npos) << t.status().ToString();
  }
}

TEST(GgufConfig, Errors) {
  {
    GgufBuilder b;
    b.StringArray("tokenizer.ggml.tokens", {"a"});
    const auto bytes = b.Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    auto c = TokenizerConfigFromGguf(*file);
    EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(c.status().message().find("tokenizer.ggml.model"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.String("tokenizer.ggml.model", "gpt2");
    b.StringArray("tokenizer.ggml.tokens", {"a"});
    const auto bytes = b.Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    auto c = TokenizerConfigFromGguf(*file);
    EXPECT_EQ(c.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(c.status().message().find("tokenizer.ggml.merges"), std::string::npos);
  }
  {
    GgufBuilder b = SpmFile();
    b.String("tokenizer.ggml.eos_token_id", "two");
    const auto bytes = b.Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    EXPECT_FALSE(TokenizerConfigFromGguf(*file).ok());
  }
  {
    GgufBuilder b = SpmFile();
    b.Scalar<uint32_t>("tokenizer.ggml.eos_token_id", ValueType::kUint32, 99);
    const auto bytes = b.Build();
    auto file = GgufFile::Parse(bytes);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(TokenizerConfigFromGguf(*file).ok());
    auto t = LoadTokenizer(*file);
    EXPECT_EQ(t.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(t.status().message().find("eos_token_id"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvmem::tokenizer
