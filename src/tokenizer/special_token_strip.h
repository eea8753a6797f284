// Which special tokens eat the whitespace next to them when text is cut at special tokens
// (Hugging Face added_tokens' lstrip / rstrip). A GGUF does not carry these flags; llama.cpp
// sets them by name in llama_vocab::impl::load, and kvmem follows the same rules, no others:
//
//   general.name contains "phi-3" or "phi3"  every special token rstrip, also "</s>"; not "<unk>",
//                                            "<s>", "<|endoftext|>"
//   pre jina-v2-de/-es/-code, or architecture nomic-bert-moe / jina-bert-v3   "<mask>" lstrip
//   general.name contains "modern-bert"      "[MASK]" lstrip
//
// Names are compared lowercased for general.name, as llama.cpp does. None of the families kvmem
// runs today (SmolLM2, Llama 3.x, Qwen 2.5/3, Gemma 3, GPT-OSS) match, and their tokenizer.json
// files set lstrip/rstrip false on every added token, so for them nothing is stripped.
// Whitespace is what C's isspace() accepts (space, \t, \n, \v, \f, \r), as in llama.cpp.
//
// Thread-safe: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvmem::tokenizer {

struct SpecialTokenStrip {
  bool lstrip = false;  // drop whitespace before the token
  bool rstrip = false;  // drop whitespace after the token
};

// One entry per token id (all false when no rule applies).
std::vector<SpecialTokenStrip> SpecialTokenStrips(const Vocab& vocab, std::string_view model_name,
                                                  std::string_view pre,
                                                  std::string_view architecture);

// isspace() in the C locale.
inline bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace kvmem::tokenizer
