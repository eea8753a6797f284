// Constrained decoding over one sequence: the grammar's parse state as tokens are generated, and
// the mask of tokens that may come next.
//
//   auto g = std::make_shared<const Grammar>(*Grammar::Parse(gbnf));   // or CompileJsonSchema
//   TokenTable table = TokenTable::FromTokenizer(tok);                  // once per tokenizer
//   Matcher m(g);
//   for each step: m.FillMask(table, &mask); mask.Apply(logits); id = sample(logits);
//                  m.AcceptToken(table, id);   // true for every id the mask allowed
//   stop when m.finished() (an end-of-generation token was accepted) or !m.CanContinue()
//
// The matcher is a pushdown automaton over UTF-8 bytes whose states are interned and whose
// transitions are cached (automaton.h), i.e. a DFA built lazily for the parts of the grammar the
// generation visits. The mask walks the token trie (token_table.h) from the current state:
// a prefix shared by many tokens is stepped once, a refused prefix skips its whole subtree, and a
// step seen before is one table load. The mask is exact: bit i is set iff AcceptToken(i) would
// succeed. Tokens that end inside a UTF-8 character are allowed iff some completion of that
// character could match.
//
// An empty mask (possible only when a grammar's expansion passes the automaton's bounds, or after
// finished()) means generation cannot go on under the grammar; the caller ends it.
//
// Not thread-safe: one Matcher per sequence. Copyable (to fork a sequence, e.g. n > 1).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/grammar/automaton.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/token_mask.h"
#include "engine/grammar/token_table.h"

namespace kvmem::engine::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Consumes `bytes` if the grammar allows them (all or nothing); false leaves the state as it
  // was.
  bool AcceptBytes(std::string_view bytes);
  // Consumes token `id` (0 <= id < table.vocab_size()). An end-of-generation token is accepted
  // only where the grammar is complete, and then finishes the matcher.
  bool AcceptToken(const TokenTable& table, int32_t id);

  // The text so far is a complete sentence of the grammar.
  bool IsComplete() const;
  // Some more text could still be accepted (false: only end of generation remains).
  bool CanContinue() const;
  // An end-of-generation token was accepted.
  bool finished() const { return finished_; }

  // Fills `mask` (resized to table.vocab_size()) with the tokens AcceptToken would accept now.
  void FillMask(const TokenTable& table, TokenMask* mask);

  // Back to the start of the grammar (the cache of states is kept).
  void Reset();

 private:
  void MaybeCompact();

  Automaton automaton_;
  int32_t state_ = Automaton::kDead;
  bool finished_ = false;
  std::vector<int32_t> walk_;  // (table.max_depth() + 1): the state at each depth of the walk
};

}  // namespace kvmem::engine::grammar
