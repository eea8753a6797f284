// Internal to grammar/: the rule table while a grammar is parsed (or built by hand), the lowering
// of repetition into generated rules, and Finish, which flattens the table into a Grammar and
// runs the checks (undefined rules, left recursion, rules that can never complete).
// Not thread-safe; one builder per parse.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/grammar/grammar.h"

namespace kvmem::engine::grammar {

class GrammarBuilder {
 public:
  using Sequence = std::vector<Element>;

  struct Rule {
    std::string name;
    std::vector<Sequence> alts;
    bool defined = false;
    int ref_line = 0, ref_col = 0;  // first use, for "used but never defined"
  };

  // The id of the rule called `name`, created (undefined) at its first use.
  Result<int32_t> RuleId(std::string_view name, int line, int col);
  // A new, already defined, generated rule named after `owner` ("owner_4").
  Result<int32_t> NewRule(int32_t owner, std::vector<Sequence> alts);
  Status Define(int32_t rule, std::vector<Sequence> alts, int line, int col);
  int32_t AddClass(CharClass c);

  // Replaces seq[atom_start..] (one atom: a class, a reference or a literal's characters) by
  // min..max copies of it; max < 0 is unbounded.
  Status Repeat(int32_t owner, Sequence* seq, size_t atom_start, int min, int max);

  Result<Grammar> Finish(std::string_view root);

 private:
  Status AddElements(size_t n);

  std::vector<Rule> rules_;
  // Named rules only: generated ones ("pair_3") are never looked up, so they cannot clash.
  std::unordered_map<std::string, int32_t> by_name_;
  std::vector<CharClass> classes_;
  size_t n_elements_ = 0;
};

// The checks Finish runs on the flattened grammar: left recursion (direct, indirect, or through
// rules that match the empty string) and rules that can never complete.
Status CheckGrammar(const Grammar& g);

// Sorts and merges the ranges of `c` (adjacent ranges join).
void NormalizeClass(CharClass* c);

}  // namespace kvmem::engine::grammar
