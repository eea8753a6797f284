// Internal to grammar/: the grammar run as a pushdown automaton over UTF-8 bytes, its states
// interned and its transitions cached, so that it behaves as a lazily built DFA.
//
// A parse position is a stack of element indices (grammar.h): the top is the character class
// to match next, the entries below are where to continue when the rule above returns. A stack
// never has a rule reference or an end on top (it is expanded first: a reference is replaced
// by the first element of each of its alternatives, one new stack each; an end is popped), and
// a reference that is the last element of its alternative pushes no continuation (a tail call,
// so `x*` runs in constant depth). The empty stack means "the root rule is complete". Because the
// grammar has no left recursion (grammar_check.cpp), expansion always terminates.
//
// A state is the sorted set of stacks reachable after the input so far, plus the bytes of an
// unfinished UTF-8 character. A byte either finishes a character (stacks whose class contains
// it advance, then expand) or extends a partial one (only stacks whose class intersects the
// code points that the partial sequence can still become are kept, so a token that ends in the
// middle of a character is refused exactly when no completion could match). Bytes that are not
// well-formed UTF-8 (RFC 3629: no overlongs, surrogates or values past U+10FFFF) are refused.
//
// States are interned by content and Step() caches (state, byte) -> state in a dense table, so a
// state seen before costs one load per byte: inside a JSON string almost every byte returns to
// the same state. Bounded: a step whose work (element visits plus stack entries written) passes
// kMaxExpandWork, or a stack deeper than kMaxStackDepth, is refused (a pathological, ambiguous or
// too deeply nested parse ends, it does not hang), so one state holds at most kMaxExpandWork
// entries; and the owner calls Compact() when the cache passes kMaxStates states or
// kMaxCachedEntries stack entries in all (over_budget()).
//
// Not thread-safe (Step mutates the cache); one per Matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"

namespace kvmem::engine::grammar {

inline constexpr int kMaxStackDepth = 4096;
inline constexpr int kMaxExpandWork = 100000;  // element visits + stack entries in one step
inline constexpr size_t kMaxStates = 16384;    // cached states before Compact
inline constexpr size_t kMaxCachedEntries = size_t{1} << 22;  // 16 MiB of stacks (and as much key)

class Automaton {
 public:
  static constexpr int32_t kDead = -1;

  explicit Automaton(std::shared_ptr<const Grammar> grammar);

  int32_t start() const { return start_; }

  // The state after `byte`, or kDead.
  int32_t Step(int32_t state, uint8_t byte) {
    const size_t i = static_cast<size_t>(state) * 256 + byte;
    int32_t t = trans_[i];
    if (t == kUnknown) {
      t = ComputeStep(state, byte);
      trans_[i] = t;
    }
    return t;
  }

  // The input so far is a sentence of the grammar.
  bool IsComplete(int32_t state) const { return states_[state].complete; }
  // Some further input could be accepted.
  bool CanContinue(int32_t state) const { return states_[state].can_continue; }

  // Every free-text character (utf8_step.h) leads from `state` back to `state`: inside a JSON
  // string, or any `[^"\\]*`-like loop. Then every token made only of free text is allowed.
  // Cached per state.
  bool LoopsOnFreeText(int32_t state);

  size_t n_states() const { return states_.size(); }
  // The cache has passed kMaxStates or kMaxCachedEntries: time to Compact().
  bool over_budget() const {
    return states_.size() > kMaxStates || cached_entries_ > kMaxCachedEntries;
  }
  // Forgets every state except the start and those in `keep`, whose ids it rewrites in place.
  void Compact(std::span<int32_t> keep);

 private:
  static constexpr int32_t kUnknown = -2;
  using Stack = std::vector<int32_t>;

  struct State {
    std::vector<Stack> stacks;  // sorted, unique
    uint32_t partial = 0;       // bits of the unfinished character
    uint8_t need = 0;           // continuation bytes still to come (0: none pending)
    uint8_t len = 0;            // length of the unfinished character
    bool complete = false;
    bool can_continue = false;
  };

  int32_t ComputeStep(int32_t state, uint8_t byte);
  // The stacks after matching code point `cp` from `from`; false when the work budget ran out.
  bool Advance(const std::vector<Stack>& from, uint32_t cp, std::vector<Stack>* out);
  // Expands `stack` until its top is a character class (or it is empty), appending to `out`.
  bool Expand(Stack stack, std::vector<Stack>* out, int* work);
  int32_t Intern(State s);

  std::shared_ptr<const Grammar> g_;
  std::vector<State> states_;
  std::vector<int32_t> trans_;  // (n_states, 256): next state, kDead or kUnknown
  std::vector<int8_t> loops_;   // (n_states): LoopsOnFreeText, -1 until known
  std::unordered_map<std::string, int32_t> ids_;  // serialized state -> id
  size_t cached_entries_ = 0;                     // stack entries in states_
  State start_state_;
  int32_t start_ = kDead;
};

}  // namespace kvmem::engine::grammar
