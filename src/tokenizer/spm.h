// SentencePiece BPE (GGUF tokenizer.ggml.model = "llama": Llama-2, Gemma): the text, spaces
// already escaped to U+2581 '▁', starts as one symbol per UTF-8 character; the adjacent pair
// whose concatenation is a vocabulary piece with the highest score merges first (leftmost on
// ties). Characters left without a piece fall back to <0xXX> byte tokens, or unk.
//
// Follows sentencepiece's bpe_model.cc: only normal, user-defined and unused pieces can be formed
// by merging, and an unused piece is split back into the pieces it was merged from.
//
// Thread-safe for concurrent reads after Create.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kvmem::tokenizer {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

class SpmModel {
 public:
  static Result<SpmModel> Create(const Vocab& vocab, int32_t unk_id);

  // Appends the ids of `text`, whose spaces must already be replaced by kSpmSpace.
  void Encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) const;

  // Id of the byte-fallback token <0xXX> for `byte`, or -1.
  int32_t ByteToken(uint8_t byte) const { return byte_to_id_[byte]; }

 private:
  std::array<int32_t, 256> byte_to_id_{};
  int32_t unk_id_ = -1;
};

// "<0x41>" -> 0x41; -1 when `text` is not a byte token text.
int ParseByteToken(std::string_view text);

}  // namespace kvmem::tokenizer
