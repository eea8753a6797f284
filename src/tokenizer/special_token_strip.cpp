#include "tokenizer/special_token_strip.h"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <string>

namespace kvmem::tokenizer {
namespace {

bool ContainsAny(std::string_view s, std::initializer_list<std::string_view> needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](std::string_view n) { return s.find(n) != std::string_view::npos; });
}

bool IsSpecial(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

std::vector<SpecialTokenStrip> SpecialTokenStrips(const Vocab& vocab, std::string_view model_name,
                                                  std::string_view pre,
                                                  std::string_view architecture) {
  std::vector<SpecialTokenStrip> strips(vocab.size());
  std::string name(model_name);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto set = [&](std::string_view text, auto member, bool value) {
    const int32_t id = vocab.Find(text);
    if (id >= 0) strips[id].*member = value;
  };
  if (ContainsAny(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      ContainsAny(architecture, {"nomic-bert-moe", "jina-bert-v3"})) {
    set("<mask>", &SpecialTokenStrip::lstrip, true);
  } else if (ContainsAny(name, {"phi-3", "phi3"})) {
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (IsSpecial(vocab.Type(id))) strips[id].rstrip = true;
    }
    set("</s>", &SpecialTokenStrip::rstrip, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      set(text, &SpecialTokenStrip::rstrip, false);
    }
  } else if (ContainsAny(name, {"modern-bert"})) {
    set("[MASK]", &SpecialTokenStrip::lstrip, true);
  }
  return strips;
}

}  // namespace kvmem::tokenizer
