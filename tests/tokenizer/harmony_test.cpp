#include "tokenizer/harmony.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "byte_tokenizer.h"

namespace kvmem::tokenizer {
namespace {

// The byte tokenizer plus harmony's control tokens.
Tokenizer HarmonyTokenizer(bool with_return_and_call = true) {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  for (int b = 0; b < 256; ++b) c.tokens.push_back(testing::Gpt2ByteChar(b));
  c.token_types.assign(256, 1);
  std::vector<std::string> specials = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>"};
  if (with_return_and_call) specials.insert(specials.end(), {"<|return|>", "<|call|>"});
  for (const std::string& s : specials) {
    c.tokens.push_back(s);
    c.token_types.push_back(3);
  }
  auto t = Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::string Decode(const Tokenizer& tok, std::string_view prompt, std::string_view reply,
                   std::string* analysis = nullptr) {
  const std::vector<int32_t> p = tok.Encode(prompt, false, /*parse_special=*/true);
  ReplyDecoder d(&tok, p);
  std::string out;
  for (int32_t id : tok.Encode(reply, false, /*parse_special=*/true)) out += *d.Push(id);
  out += d.Flush();
  if (analysis != nullptr) *analysis = d.analysis();
  return out;
}

// llama.cpp's o200k_harmony rule: <|return|> and <|call|> end generation, <|end|> (which closes
// every message of a reply) then does not; without them <|end|> does, as before.
TEST(Harmony, EndOfGeneration) {
  const Tokenizer tok = HarmonyTokenizer();
  EXPECT_TRUE(tok.IsEndOfGeneration(tok.FindToken("<|return|>")));
  EXPECT_TRUE(tok.IsEndOfGeneration(tok.FindToken("<|call|>")));
  EXPECT_FALSE(tok.IsEndOfGeneration(tok.FindToken("<|end|>")));
  const Tokenizer plain = HarmonyTokenizer(/*with_return_and_call=*/false);
  EXPECT_TRUE(plain.IsEndOfGeneration(plain.FindToken("<|end|>")));
}

// After the generation prompt, only the final channel is shown; the analysis channel is kept
// apart, headers and control tokens are not text.
TEST(Harmony, ReplyShowsTheFinalChannel) {
  const Tokenizer tok = HarmonyTokenizer();
  const std::string prompt = "<|start|>user<|message|>hi<|end|><|start|>assistant";
  std::string analysis;
  EXPECT_EQ(Decode(tok, prompt,
                   "<|channel|>analysis<|message|>User greets. Answer.<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>Hello, caf\u00e9!<|return|>",
                   &analysis),
            "Hello, caf\u00e9!");
  EXPECT_EQ(analysis, "User greets. Answer.");
  // Commentary and headers with a recipient or a content type are not shown either.
  EXPECT_EQ(Decode(tok, prompt,
                   "<|channel|>commentary to=functions.f json<|message|>{}<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>done"),
            "done");
  // A reply that never opens a message is shown whole, at its end.
  EXPECT_EQ(Decode(tok, prompt, "plain words<|return|>"), "plain words");
  EXPECT_EQ(Decode(tok, prompt, "plain words"), "plain words");
}

// Any other prompt (a raw completion) shows every token's text, control tokens excepted.
TEST(Harmony, OtherPromptsShowEverything) {
  const Tokenizer tok = HarmonyTokenizer();
  EXPECT_EQ(Decode(tok, "Once upon a time", "<|channel|>analysis<|message|>x"), "analysisx");
  EXPECT_FALSE(
      EndsWithHarmonyGenerationPrompt(tok, tok.Encode("<|start|>assistant ", false, true)));
  EXPECT_TRUE(EndsWithHarmonyGenerationPrompt(tok, tok.Encode("<|start|>assistant", false, true)));
}

// Tool messages are refused; an assistant message carrying channel tags is refused as the
// official template refuses it.
TEST(Harmony, RefusesWhatItDoesNotRender) {
  std::string out;
  const std::vector<ChatMessage> tool = {{"user", "q"}, {"tool", "{}"}};  // no call before it
  EXPECT_EQ(RenderHarmony(tool, true, "2026-01-15", "", &out).code(),
            ErrorCode::kInvalidArgument);
  const std::vector<ChatMessage> tags = {{"assistant", "<|channel|>final<|message|>x"}};
  EXPECT_EQ(RenderHarmony(tags, true, "2026-01-15", "", &out).code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvmem::tokenizer
