// The static checks of a lowered grammar. Both fixpoints are worklists over reverse references,
// linear in the grammar's size (a plain "repeat until nothing changes" loop is quadratic on the
// long rule chains that {m,n} produces).
#include <algorithm>
#include <string>
#include <vector>

#include "engine/grammar/grammar_builder.h"

namespace kvmem::engine::grammar {
namespace {

// The least set of rules R such that a rule is in R when one of its alternatives has every
// element "satisfied": a rule reference when the rule is in R, a character class when
// `classes_satisfy`. With classes_satisfy = false this is "can match the empty string"
// (nullable); with true, "can complete in finitely many steps" (productive).
std::vector<bool> RuleFixpoint(const Grammar& g, bool classes_satisfy) {
  const int32_t n = g.n_rules();
  std::vector<int32_t> alt_owner, pending;
  std::vector<std::vector<int32_t>> users(n);  // rule -> alternatives that reference it
  std::vector<int32_t> work;
  for (int32_t r = 0; r < n; ++r) {
    for (int32_t start : g.alternatives(r)) {
      const auto alt = static_cast<int32_t>(alt_owner.size());
      alt_owner.push_back(r);
      int32_t count = 0;
      bool blocked = false;
      for (int32_t p = start; g.element(p).kind != Element::Kind::kEnd; ++p) {
        const Element& e = g.element(p);
        if (e.kind == Element::Kind::kChars) {
          blocked |= !classes_satisfy;
        } else {
          users[e.value].push_back(alt);
          ++count;
        }
      }
      pending.push_back(blocked ? -1 : count);
      if (count == 0 && !blocked) work.push_back(r);
    }
  }
  std::vector<bool> in(n, false);
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    if (in[r]) continue;
    in[r] = true;
    for (int32_t alt : users[r]) {
      if (pending[alt] > 0 && --pending[alt] == 0) work.push_back(alt_owner[alt]);
    }
  }
  return in;
}

// Rules that `rule` may call before consuming any character.
std::vector<int32_t> LeftCalls(const Grammar& g, int32_t rule, const std::vector<bool>& nullable) {
  std::vector<int32_t> out;
  for (int32_t start : g.alternatives(rule)) {
    for (int32_t p = start; g.element(p).kind == Element::Kind::kRule; ++p) {
      out.push_back(g.element(p).value);
      if (!nullable[g.element(p).value]) break;
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Status CheckLeftRecursion(const Grammar& g, const std::vector<bool>& nullable) {
  const int32_t n = g.n_rules();
  std::vector<std::vector<int32_t>> calls(n);
  for (int32_t r = 0; r < n; ++r) calls[r] = LeftCalls(g, r, nullable);
  enum : uint8_t { kWhite, kGray, kBlack };
  std::vector<uint8_t> color(n, kWhite);
  struct Frame {
    int32_t rule = 0;
    size_t next = 0;
  };
  std::vector<Frame> path;
  for (int32_t s = 0; s < n; ++s) {
    if (color[s] != kWhite) continue;
    path.push_back({s, 0});
    color[s] = kGray;
    while (!path.empty()) {
      Frame& f = path.back();
      if (f.next == calls[f.rule].size()) {
        color[f.rule] = kBlack;
        path.pop_back();
        continue;
      }
      const int32_t c = calls[f.rule][f.next++];
      if (color[c] == kGray) {
        std::string cycle;
        size_t i = 0;
        while (path[i].rule != c) ++i;
        for (; i < path.size(); ++i) cycle += g.rule_name(path[i].rule) + " -> ";
        cycle += g.rule_name(c);
        return InvalidArgument("rule '" + g.rule_name(c) + "' is left-recursive (" + cycle +
                               "); rewrite it with repetition, e.g. x ::= y (\"+\" y)*");
      }
      if (color[c] == kWhite) {
        color[c] = kGray;
        path.push_back({c, 0});
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckGrammar(const Grammar& g) {
  KVMEM_RETURN_IF_ERROR(CheckLeftRecursion(g, RuleFixpoint(g, /*classes_satisfy=*/false)));
  const std::vector<bool> productive = RuleFixpoint(g, /*classes_satisfy=*/true);
  for (int32_t r = 0; r < g.n_rules(); ++r) {
    if (!productive[r]) {
      return InvalidArgument("rule '" + g.rule_name(r) +
                             "' can never complete: every alternative recurses without end");
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::engine::grammar
