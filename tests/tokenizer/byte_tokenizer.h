// A byte-level tokenizer for tests of code above the tokenizer: ids 0..255 are the bytes (GPT-2's
// byte alphabet, no merges), 256 is BOS, so a text of n bytes encodes to n + 1 tokens and every
// figure can be checked by hand.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace kvmem::tokenizer::testing {

inline bool Gpt2Printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

// GPT-2's byte-to-unicode alphabet as UTF-8 (printable bytes map to themselves, the others to
// U+0100 and up in byte order).
inline std::string Gpt2ByteChar(int b) {
  int cp = b;
  if (!Gpt2Printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += Gpt2Printable(x) ? 0 : 1;
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

inline Tokenizer ByteTokenizer() {
  TokenizerConfig c;
  c.model = "gpt2";
  c.pre = "gpt2";
  for (int b = 0; b < 256; ++b) c.tokens.push_back(Gpt2ByteChar(b));
  c.token_types.assign(256, 1);
  c.tokens.push_back("<s>");
  c.token_types.push_back(3);
  c.bos_id = 256;
  c.add_bos = true;
  auto t = Tokenizer::Create(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

}  // namespace kvmem::tokenizer::testing
