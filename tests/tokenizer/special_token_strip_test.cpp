// Special tokens' lstrip/rstrip: llama.cpp's rules by model name (special_token_strip.h) on a
// byte vocabulary, and the SmolLM2 vocabulary under the Phi-3 rule against Hugging Face
// `tokenizers` with rstrip=True on the same tokens (pretok_vectors.json, "strip_phi3").
#include "tokenizer/special_token_strip.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "byte_tokenizer.h"
#include "test_util.h"

namespace kvmem::tokenizer {
namespace {

// Bytes 0..255, then <s> </s> <unk> <|endoftext|> <|user|> <mask> (controls).
Tokenizer Make(const std::string& name, const std::string& architecture = "") {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  c.name = name;
  c.architecture = architecture;
  for (int b = 0; b < 256; ++b) c.tokens.push_back(testing::Gpt2ByteChar(b));
  c.token_types.assign(256, 1);
  for (const char* s : {"<s>", "</s>", "<unk>", "<|endoftext|>", "<|user|>", "<mask>"}) {
    c.tokens.push_back(s);
    c.token_types.push_back(3);
  }
  auto t = Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

constexpr int32_t kS = 256, kEndS = 257, kUnk = 258, kEot = 259, kUser = 260, kMask = 261;

std::vector<int32_t> Bytes(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

std::vector<int32_t> Cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(SpecialTokenStrip, RulesByName) {
  const Tokenizer phi3 = Make("Phi-3-mini-4k-instruct");
  const auto strips = SpecialTokenStrips(phi3.vocab(), "Phi-3-mini-4k-instruct", "gpt2", "");
  EXPECT_TRUE(strips[kUser].rstrip);
  EXPECT_TRUE(strips[kEndS].rstrip);
  EXPECT_TRUE(strips[kMask].rstrip);
  for (int32_t id : {kS, kUnk, kEot}) EXPECT_FALSE(strips[id].rstrip) << id;
  EXPECT_FALSE(strips['a'].rstrip);  // normal tokens never strip
  const auto none = SpecialTokenStrips(phi3.vocab(), "Qwen2.5-7B-Instruct", "qwen2", "qwen2");
  for (const auto& s : none) EXPECT_FALSE(s.lstrip || s.rstrip);
  const auto mask = SpecialTokenStrips(phi3.vocab(), "", "gpt2", "nomic-bert-moe");
  EXPECT_TRUE(mask[kMask].lstrip);
  EXPECT_FALSE(mask[kMask].rstrip);
}

TEST(SpecialTokenStrip, Phi3DropsWhitespaceAfterSpecials) {
  const Tokenizer t = Make("phi3 mini");
  EXPECT_EQ(t.Encode("a <|user|> \n\tb", false, true), Cat({Bytes("a "), {kUser}, Bytes("b")}));
  EXPECT_EQ(t.Encode("<|user|>   ", false, true), (std::vector<int32_t>{kUser}));
  // <|endoftext|> keeps its whitespace; non-ASCII spaces are not isspace().
  EXPECT_EQ(t.Encode("<|endoftext|> x", false, true), Cat({{kEot}, Bytes(" x")}));
  EXPECT_EQ(t.Encode("<|user|>\xC2\xA0x", false, true), Cat({{kUser}, Bytes("\xC2\xA0x")}));
  // Not parsed as special: plain text, nothing stripped.
  EXPECT_EQ(t.Encode("<|user|> b", false, false), Bytes("<|user|> b"));
  // Other models keep every space.
  EXPECT_EQ(Make("SmolLM2").Encode("a <|user|> b", false, true),
            Cat({Bytes("a "), {kUser}, Bytes(" b")}));
}

TEST(SpecialTokenStrip, MaskDropsWhitespaceBefore) {
  const Tokenizer t = Make("", "nomic-bert-moe");
  EXPECT_EQ(t.Encode("a \t <mask> b", false, true), Cat({Bytes("a"), {kMask}, Bytes(" b")}));
  EXPECT_EQ(t.Encode("  <mask>", false, true), (std::vector<int32_t>{kMask}));
}

TEST(SpecialTokenStrip, Phi3RuleMatchesHuggingFace) {
  const auto vectors = testing::LoadVectors("pretok_vectors.json");
  const auto& v = vectors["strip_phi3"];
  ASSERT_TRUE(v.is_object());
  auto file = gguf::GgufFile::Open(testing::SmolLm2Path().string());
  if (!file.ok()) GTEST_SKIP() << testing::SmolLm2Path() << " not present";
  auto config = TokenizerConfigFromGguf(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  config->pre = v["pre"];
  config->name = v["general_name"];
  auto tok = Tokenizer::Create(std::move(config).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  int passed = 0;
  for (const auto& c : v["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok->Encode(text, false, true);
    EXPECT_EQ(got, ids) << "text: " << testing::Escaped(text);
    passed += got == ids;
  }
  RecordProperty("passed", passed);
}

}  // namespace
}  // namespace kvmem::tokenizer
