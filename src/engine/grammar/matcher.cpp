#include "engine/grammar/matcher.h"

#include <span>
#include <utility>

namespace kvmem::engine::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar)
    : automaton_(std::move(grammar)), state_(automaton_.start()) {}

void Matcher::Reset() {
  state_ = automaton_.start();
  finished_ = false;
}

bool Matcher::IsComplete() const { return !finished_ && automaton_.IsComplete(state_); }
bool Matcher::CanContinue() const { return !finished_ && automaton_.CanContinue(state_); }

void Matcher::MaybeCompact() {
  if (automaton_.over_budget()) automaton_.Compact(std::span(&state_, 1));
}

bool Matcher::AcceptBytes(std::string_view bytes) {
  if (finished_) return false;
  int32_t s = state_;
  for (char c : bytes) {
    s = automaton_.Step(s, static_cast<uint8_t>(c));
    if (s == Automaton::kDead) return false;
  }
  state_ = s;
  MaybeCompact();
  return true;
}

bool Matcher::AcceptToken(const TokenTable& table, int32_t id) {
  if (finished_) return false;
  if (table.is_eog(id)) {
    if (!automaton_.IsComplete(state_)) return false;
    finished_ = true;
    return true;
  }
  std::string_view piece = table.piece(id);
  if (piece.empty() || piece.size() > 0xFFFF) return false;  // never allowed (token_table.h)
  return AcceptBytes(piece);
}

void Matcher::FillMask(const TokenTable& table, TokenMask* mask) {
  mask->Reset(table.vocab_size());
  if (finished_) return;
  MaybeCompact();
  walk_.resize(static_cast<size_t>(table.max_depth()) + 1);
  walk_[0] = state_;
  const auto nodes = table.nodes();
  const auto ids = table.token_ids();
  const size_t n = nodes.size();
  // Inside free text (a JSON string), the free tokens are allowed as a set and only the other
  // subtrees are walked.
  const bool loops = automaton_.LoopsOnFreeText(state_);
  if (loops) *mask = table.free_tokens();
  for (size_t i = 0; i < n;) {
    const TokenTable::Node& node = nodes[i];
    if (loops && table.free_subtree(i)) {
      i = static_cast<size_t>(node.next);
      continue;
    }
    const int32_t s = automaton_.Step(walk_[node.depth - 1], node.byte);
    if (s == Automaton::kDead) {
      i = static_cast<size_t>(node.next);
      continue;
    }
    walk_[node.depth] = s;
    if (automaton_.over_budget()) {  // a walk of a pathological grammar: keep only its path
      automaton_.Compact(std::span(walk_).first(static_cast<size_t>(node.depth) + 1));
      state_ = walk_[0];
    }
    for (int32_t k = node.tokens_begin, end = table.tokens_end(i); k < end; ++k) mask->Set(ids[k]);
    ++i;
  }
  if (automaton_.IsComplete(state_)) {
    for (int32_t id : table.eog_ids()) mask->Set(id);
  }
}

}  // namespace kvmem::engine::grammar
