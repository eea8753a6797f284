// The token table shared by the BPE and SentencePiece models: text, type and score per id, and
// the reverse index from text to id.
//
// Move-only (the index holds views into the token texts). Thread-safe for concurrent reads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kvmem::tokenizer {

// Values of the GGUF key tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <bos>: never produced from text unless parse_special
  kUserDefined = 4,  // added tokens that are always matched as a whole
  kUnused = 5,
  kByte = 6,  // SentencePiece byte fallback <0xXX>
};

class Vocab {
 public:
  // `types` and `scores` may be empty (all kNormal, all 0) or must match tokens.size().
  static Result<Vocab> Create(std::vector<std::string> tokens, std::vector<int32_t> types,
                              std::vector<float> scores);

  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool Contains(int32_t id) const { return id >= 0 && id < size(); }
  // Preconditions for the accessors: Contains(id).
  const std::string& Text(int32_t id) const { return texts_[id]; }
  TokenType Type(int32_t id) const { return types_[id]; }
  float Score(int32_t id) const { return scores_[id]; }
  // The id whose text is `text`, or -1. When a text repeats, the last id wins (as in llama.cpp).
  int32_t Find(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  Vocab() = default;

  std::vector<std::string> texts_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::unordered_map<std::string_view, int32_t> index_;  // views into texts_
};

}  // namespace kvmem::tokenizer
