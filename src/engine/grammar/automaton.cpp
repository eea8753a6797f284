#include "engine/grammar/automaton.h"

#include "engine/grammar/utf8_step.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvmem::engine::grammar {
namespace {

void SortUnique(std::vector<std::vector<int32_t>>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
}

}  // namespace

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  State s;
  int work = 0;
  for (int32_t alt : g_->alternatives(g_->root())) {
    if (!Expand(Stack{alt}, &s.stacks, &work)) {
      s.stacks.clear();  // past the budget: nothing is accepted
      break;
    }
  }
  SortUnique(&s.stacks);
  start_state_ = s;
  start_ = Intern(std::move(s));
}

bool Automaton::Expand(Stack stack, std::vector<Stack>* out, int* work) {
  for (;;) {
    if (++*work > kMaxExpandWork) return false;
    const int32_t pos = stack.empty() ? -1 : stack.back();
    if (pos < 0 || g_->element(pos).kind == Element::Kind::kChars) {
      *work += static_cast<int>(stack.size());  // the entries this state will hold
      if (*work > kMaxExpandWork) return false;
      out->push_back(std::move(stack));
      return true;
    }
    const Element& e = g_->element(pos);
    stack.pop_back();
    if (e.kind == Element::Kind::kEnd) continue;
    if (g_->element(pos + 1).kind != Element::Kind::kEnd) stack.push_back(pos + 1);
    if (stack.size() >= static_cast<size_t>(kMaxStackDepth)) return true;  // too deep: dropped
    const auto alts = g_->alternatives(e.value);
    for (size_t i = 0; i < alts.size(); ++i) {
      Stack next = i + 1 < alts.size() ? stack : std::move(stack);
      next.push_back(alts[i]);
      if (!Expand(std::move(next), out, work)) return false;
    }
    return true;
  }
}

bool Automaton::Advance(const std::vector<Stack>& from, uint32_t cp, std::vector<Stack>* out) {
  int work = 0;
  for (const Stack& s : from) {
    if (s.empty()) continue;
    const int32_t top = s.back();
    if (!g_->char_class(g_->element(top).value).Contains(cp)) continue;
    Stack next = s;
    next.back() = top + 1;
    if (!Expand(std::move(next), out, &work)) return false;
  }
  SortUnique(out);
  return true;
}

int32_t Automaton::ComputeStep(int32_t state, uint8_t byte) {
  const State& st = states_[state];
  Utf8Partial p{st.partial, st.need, st.len};
  uint32_t lo, hi;
  const Utf8Step step = StepUtf8(&p, byte, &lo, &hi);
  if (step == Utf8Step::kInvalid) return kDead;
  State next;
  if (step == Utf8Step::kComplete) {
    if (!Advance(st.stacks, lo, &next.stacks) || next.stacks.empty()) return kDead;
  } else {
    // Only the stacks that some completion of the character could still advance.
    for (const Stack& s : st.stacks) {
      if (!s.empty() && g_->char_class(g_->element(s.back()).value).Intersects(lo, hi)) {
        next.stacks.push_back(s);
      }
    }
    if (next.stacks.empty()) return kDead;
    next.partial = p.val, next.need = p.need, next.len = p.len;
  }
  return Intern(std::move(next));  // `st` may dangle from here on
}

bool Automaton::LoopsOnFreeText(int32_t state) {
  int8_t& known = loops_[state];
  if (known >= 0) return known != 0;
  const State& st = states_[state];
  // A state without stacks (a start expansion past the budget) accepts nothing: every step
  // from it is dead, so it loops on nothing (an empty Advance would equal it vacuously).
  bool loops = st.need == 0 && !st.stacks.empty();
  if (loops) {
    // Advance() is constant between the boundaries of the top classes' ranges (and of the free
    // set), so one code point per interval decides for all of them.
    std::vector<uint32_t> cuts = {0x20, '"', '"' + 1, '\\', '\\' + 1, 0xD800, 0xE000, 0x110000};
    for (const Stack& s : st.stacks) {
      if (s.empty()) continue;
      for (const auto& [a, b] : g_->char_class(g_->element(s.back()).value).ranges) {
        cuts.push_back(a);
        cuts.push_back(b + 1);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<Stack> next;
    for (size_t i = 0; loops && i + 1 < cuts.size(); ++i) {
      const uint32_t cp = cuts[i];
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || !IsFreeChar(cp)) continue;
      next.clear();
      loops = Advance(st.stacks, cp, &next) && next == st.stacks;
    }
  }
  known = loops ? 1 : 0;  // Advance() interns nothing: `known` still refers to loops_
  return loops;
}

int32_t Automaton::Intern(State s) {
  std::string key;
  key.reserve(8 + s.stacks.size() * 16);
  const uint32_t head[2] = {s.partial, static_cast<uint32_t>(s.need) << 8 | s.len};
  key.append(reinterpret_cast<const char*>(head), sizeof(head));
  for (const Stack& st : s.stacks) {
    const auto n = static_cast<int32_t>(st.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof(n));
    key.append(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(int32_t));
  }
  auto [it, inserted] = ids_.emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (!inserted) return it->second;
  s.complete = s.need == 0 && !s.stacks.empty() && s.stacks.front().empty();
  s.can_continue = s.stacks.size() > (s.complete ? 1u : 0u);
  for (const Stack& st : s.stacks) cached_entries_ += st.size();
  states_.push_back(std::move(s));
  trans_.resize(states_.size() * 256, kUnknown);
  loops_.push_back(-1);
  return it->second;
}

void Automaton::Compact(std::span<int32_t> keep) {
  std::vector<State> old = std::move(states_);
  states_.clear();
  trans_.clear();
  loops_.clear();
  ids_.clear();
  cached_entries_ = 0;
  start_ = Intern(start_state_);
  for (int32_t& id : keep) {
    if (id != kDead) id = Intern(old[static_cast<size_t>(id)]);  // a repeated id interns once
  }
}

}  // namespace kvmem::engine::grammar
