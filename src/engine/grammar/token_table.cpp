#include "engine/grammar/token_table.h"

#include <algorithm>
#include <utility>

#include "engine/grammar/utf8_step.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::engine::grammar {

TokenTable::TokenTable(std::vector<std::string> pieces, std::vector<int32_t> eog_ids)
    : pieces_(std::move(pieces)), is_eog_(pieces_.size(), 0) {
  for (int32_t id : eog_ids) {
    if (id >= 0 && id < vocab_size() && !is_eog_[id]) {
      is_eog_[id] = 1;
      eog_ids_.push_back(id);
    }
  }
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (!is_eog_[id] && !pieces_[id].empty() && pieces_[id].size() <= 0xFFFF) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return pieces_[a] != pieces_[b] ? pieces_[a] < pieces_[b] : a < b;
  });
  // Sorted pieces visit the trie in preorder: each piece adds the nodes past its common prefix
  // with the previous one. open[d] is the node at depth d+1 on the current path.
  std::vector<int32_t> open;
  std::string_view prev;
  // Free-text decoding along the current path: free[d] / dec[d] after its first d bytes.
  std::vector<uint8_t> node_free;
  std::vector<uint8_t> free(1, 1);
  std::vector<Utf8Partial> dec(1);
  free_tokens_.Reset(vocab_size());
  for (int32_t id : order) {
    std::string_view p = pieces_[id];
    size_t lcp = 0;
    while (lcp < p.size() && lcp < prev.size() && p[lcp] == prev[lcp]) ++lcp;
    const auto here = static_cast<int32_t>(nodes_.size());
    while (open.size() > lcp) {
      nodes_[open.back()].next = here;
      open.pop_back();
    }
    for (size_t d = lcp; d < p.size(); ++d) {
      Node n;
      n.depth = static_cast<uint16_t>(d + 1);
      n.byte = static_cast<uint8_t>(p[d]);
      n.tokens_begin = static_cast<int32_t>(ids_.size());
      open.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(n);
      Utf8Partial q = dec[d];
      uint32_t lo = 0, hi = 0;
      const Utf8Step step = StepUtf8(&q, n.byte, &lo, &hi);
      const bool ok = free[d] && step != Utf8Step::kInvalid &&
                      (step == Utf8Step::kPartial || IsFreeChar(lo));
      free.resize(d + 2);
      dec.resize(d + 2);
      free[d + 1] = ok;
      dec[d + 1] = q;
      node_free.push_back(ok);
    }
    if (free[p.size()]) free_tokens_.Set(id);
    ids_.push_back(id);  // ends at the deepest open node (the previous one again for a duplicate)
    max_depth_ = std::max(max_depth_, static_cast<int>(p.size()));
    prev = p;
  }
  for (int32_t i : open) nodes_[i].next = static_cast<int32_t>(nodes_.size());
  // A subtree is all free when no node in [i, next) is not: prefix counts of non-free nodes.
  std::vector<int32_t> not_free(nodes_.size() + 1, 0);
  for (size_t i = 0; i < nodes_.size(); ++i) not_free[i + 1] = not_free[i] + !node_free[i];
  free_subtree_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    free_subtree_[i] = not_free[nodes_[i].next] == not_free[i];
  }
  Node sentinel;
  sentinel.tokens_begin = static_cast<int32_t>(ids_.size());
  nodes_.push_back(sentinel);
}

TokenTable TokenTable::FromTokenizer(const tokenizer::Tokenizer& tokenizer) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto type = tokenizer.vocab().Type(id);
    if (type == tokenizer::TokenType::kUnused) continue;
    pieces[id] = std::string(tokenizer.TokenToPiece(id));  // "" for control and unknown tokens
  }
  return TokenTable(std::move(pieces), tokenizer.end_of_generation_ids());
}

}  // namespace kvmem::engine::grammar
