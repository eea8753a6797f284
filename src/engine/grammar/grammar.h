// A context-free grammar in GBNF (llama.cpp's grammar format), parsed from untrusted text and
// lowered to a flat table that the matcher (matcher.h) walks.
//
// Accepted text:
//   # a comment, to the end of the line
//   root   ::= "{" ws pair ("," ws pair)* "}"      rules: name ::= alternatives
//   pair   ::= [a-z]+ ":" ws ( "yes" | "no" )      sequences, groups, alternation
//   ws     ::= [ \t\n]{0,8}                        repetition: * + ? {m} {m,} {m,n} {,n}
//   any    ::= [^"\\] | .                          classes, negated classes, any character
// A rule ends at the end of its line unless the next non-blank line starts with "|" or the line
// ends inside parentheses. Literals and classes take the escapes \n \r \t \\ \" \' \[ \] \- \^ \/
// \xHH \uHHHH \UHHHHHHHH; everything else is UTF-8 text (the grammar matches code points).
//
// Lowering: a group, a repeated literal and each repetition become generated rules (named after
// the rule they appear in, "pair_3"), so every alternative is a sequence of two kinds of element,
// a character class or a rule reference. x* is the right-recursive `r ::= x r | ""`, which the
// matcher runs as a tail call; x{m,n} is m copies of x then n-m nested optionals.
//
// Refused with InvalidArgument (line:column and the construct): syntax errors, a rule used but
// never defined or defined twice, no root rule, left recursion (also through rules that can
// match the empty string: the matcher would expand it forever), a root that can never complete,
// and sizes past the limits below (so a hostile grammar costs bounded memory and time).
//
// Thread-safety: immutable after Parse; share one Grammar between any number of matchers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvmem::engine::grammar {

// Limits on untrusted grammars.
inline constexpr size_t kMaxGrammarBytes = 1 << 20;
inline constexpr int kMaxNesting = 64;            // parentheses inside one rule
inline constexpr int kMaxRepetition = 10000;      // m and n of {m,n}
inline constexpr size_t kMaxElements = 1 << 20;   // after lowering, over all rules
inline constexpr size_t kMaxRules = 1 << 17;

// A set of code points: sorted, non-overlapping inclusive ranges, possibly negated.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;

  bool Contains(uint32_t cp) const;
  // Whether some code point in [lo, hi] is in the set.
  bool Intersects(uint32_t lo, uint32_t hi) const;
};

struct Element {
  enum class Kind : uint8_t { kEnd, kChars, kRule };
  Kind kind = Kind::kEnd;
  int32_t value = 0;  // kChars: index into classes(); kRule: rule id
};

class Grammar {
 public:
  // Parses and checks `text`; `root` names the start rule.
  static Result<Grammar> Parse(std::string_view text, std::string_view root = "root");

  int32_t root() const { return root_; }
  int32_t n_rules() const { return static_cast<int32_t>(rule_alts_.size()); }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  // Indices into elements() where each alternative of `rule` starts; every alternative runs to
  // the next kEnd element.
  std::span<const int32_t> alternatives(int32_t rule) const { return rule_alts_[rule]; }
  const Element& element(int32_t pos) const { return elements_[pos]; }
  const CharClass& char_class(int32_t i) const { return classes_[i]; }
  size_t n_elements() const { return elements_.size(); }

  // The grammar again as GBNF, one rule per line (generated rules included); for debugging.
  std::string ToString() const;

 private:
  friend class GrammarBuilder;
  Grammar() = default;

  std::vector<Element> elements_;
  std::vector<CharClass> classes_;
  std::vector<std::vector<int32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  int32_t root_ = -1;
};

}  // namespace kvmem::engine::grammar
