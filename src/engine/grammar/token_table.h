// The bytes of every vocabulary token, arranged for the grammar's token mask: a trie in preorder
// (a flat array; each node knows where its subtree ends), so the matcher walks each shared
// prefix once and skips a whole subtree as soon as its prefix is refused.
//
// Built once per tokenizer (Gemma-3's 262K tokens: a few hundred milliseconds) and shared.
// Tokens with no text (control, unknown, unused) are never allowed; the end-of-generation tokens
// are kept apart and allowed only where the grammar is complete.
//
// Thread-safety: immutable after construction; share freely.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/token_mask.h"

namespace kvmem::tokenizer {
class Tokenizer;
}

namespace kvmem::engine::grammar {

class TokenTable {
 public:
  struct Node {
    int32_t next = 0;         // index just past this node's subtree
    int32_t tokens_begin = 0;  // this node's tokens: ids_[tokens_begin, nodes_[i+1].tokens_begin)
    uint16_t depth = 0;       // bytes from the root, >= 1
    uint8_t byte = 0;
  };

  // pieces[id]: the bytes token `id` stands for; "" for a token never allowed. eog_ids: the
  // end-of-generation tokens (their piece is ignored). Pieces longer than 65535 bytes are never
  // allowed.
  TokenTable(std::vector<std::string> pieces, std::vector<int32_t> eog_ids);
  static TokenTable FromTokenizer(const tokenizer::Tokenizer& tokenizer);

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_[id]; }
  bool is_eog(int32_t id) const { return is_eog_[id] != 0; }
  std::span<const int32_t> eog_ids() const { return eog_ids_; }

  // The trie: nodes()[i] has tokens token_ids()[nodes()[i].tokens_begin, tokens_end(i)).
  std::span<const Node> nodes() const { return {nodes_.data(), nodes_.size() - 1}; }
  int32_t tokens_end(size_t node) const { return nodes_[node + 1].tokens_begin; }
  std::span<const int32_t> token_ids() const { return ids_; }
  int max_depth() const { return max_depth_; }

  // Tokens made only of free text (utf8_step.h: well-formed UTF-8, nothing below U+0020, no '"'
  // or '\\'; a token may end inside a character). From a state that loops on free text they are
  // all allowed, so the mask starts from this set and skips the subtrees below the root that
  // hold nothing else (free_subtree).
  const TokenMask& free_tokens() const { return free_tokens_; }
  bool free_subtree(size_t node) const { return free_subtree_[node] != 0; }

 private:
  std::vector<std::string> pieces_;
  std::vector<uint8_t> is_eog_;
  std::vector<int32_t> eog_ids_;
  std::vector<Node> nodes_;  // preorder, plus a sentinel holding the end of the last token list
  std::vector<int32_t> ids_;
  int max_depth_ = 0;
  TokenMask free_tokens_;
  std::vector<uint8_t> free_subtree_;  // (nodes): every node of the subtree is free text
};

}  // namespace kvmem::engine::grammar
