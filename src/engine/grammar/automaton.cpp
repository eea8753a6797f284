#include "engine/grammar/automaton.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvmem::engine::grammar {
namespace {

// Smallest code point of a UTF-8 sequence of each length (shorter forms are overlong).
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};

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
    if (stack.empty()) {
      out->push_back(std::move(stack));
      return true;
    }
    const int32_t pos = stack.back();
    const Element& e = g_->element(pos);
    if (e.kind == Element::Kind::kChars) {
      out->push_back(std::move(stack));
      return true;
    }
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
  uint32_t val;
  uint8_t need, len;
  if (st.need == 0) {
    if (byte < 0x80) {
      val = byte, need = 0, len = 1;
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      val = byte & 0x1Fu, need = 1, len = 2;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      val = byte & 0x0Fu, need = 2, len = 3;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      val = byte & 0x07u, need = 3, len = 4;
    } else {
      return kDead;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return kDead;
    val = (st.partial << 6) | (byte & 0x3Fu), need = static_cast<uint8_t>(st.need - 1);
    len = st.len;
  }
  // The code points this sequence can still become: [lo, hi], valid ones only.
  const uint32_t lo = std::max(val << (6 * need), kMinOfLength[len]);
  const uint32_t hi = std::min(need == 0 ? val : (val << (6 * need)) | ((1u << (6 * need)) - 1),
                               0x10FFFFu);
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return kDead;

  State next;
  if (need == 0) {
    if (!Advance(st.stacks, val, &next.stacks) || next.stacks.empty()) return kDead;
  } else {
    for (const Stack& s : st.stacks) {
      if (!s.empty() && g_->char_class(g_->element(s.back()).value).Intersects(lo, hi)) {
        next.stacks.push_back(s);
      }
    }
    if (next.stacks.empty()) return kDead;
    next.partial = val, next.need = need, next.len = len;
  }
  return Intern(std::move(next));  // `st` may dangle from here on
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
  states_.push_back(std::move(s));
  trans_.resize(states_.size() * 256, kUnknown);
  return it->second;
}

int32_t Automaton::Compact(int32_t keep) {
  State s = std::move(states_[keep]);
  states_.clear();
  trans_.clear();
  ids_.clear();
  start_ = Intern(start_state_);
  return Intern(std::move(s));
}

}  // namespace kvmem::engine::grammar
