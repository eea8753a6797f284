// Byte-level BPE (GPT-2, SmolLM, Llama-3, Qwen2): a pre-tokenized word's bytes are mapped to
// GPT-2's printable byte alphabet, one symbol per byte, and adjacent symbols are merged
// lowest-rank merge first (rank = position in tokenizer.ggml.merges), leftmost on ties, until no
// ranked pair is left.
//
// Thread-safe for concurrent reads after Create.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kvmem::tokenizer {

class BpeModel {
 public:
  // `merges` are "left right" pairs of token texts. Every byte of GPT-2's alphabet should have a
  // token; a byte without one encodes as unk_id (or is dropped when unk_id < 0).
  // ignore_merges: a word that is itself a token is emitted whole (Llama-3's tokenizer.json).
  static Result<BpeModel> Create(const Vocab& vocab, std::span<const std::string> merges,
                                 bool ignore_merges, int32_t unk_id);

  // Appends the ids of one word given as raw bytes (not yet byte-level mapped).
  void EncodeWord(const Vocab& vocab, std::string_view word, std::vector<int32_t>* out) const;

  // The raw bytes a normal token stands for (inverse of the byte-level mapping); characters
  // outside GPT-2's alphabet are kept as their UTF-8.
  static std::string DecodeByteLevel(std::string_view token_text);

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // id of the merged token
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> merge
  std::array<int32_t, 256> byte_to_id_{};
  bool ignore_merges_ = false;
};

}  // namespace kvmem::tokenizer
