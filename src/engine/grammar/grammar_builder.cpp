#include "engine/grammar/grammar_builder.h"

#include <algorithm>
#include <utility>

namespace kvmem::engine::grammar {

void NormalizeClass(CharClass* c) {
  auto& r = c->ranges;
  std::sort(r.begin(), r.end());
  size_t out = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (out > 0 && r[i].first <= r[out - 1].second + 1) {
      r[out - 1].second = std::max(r[out - 1].second, r[i].second);
    } else {
      r[out++] = r[i];
    }
  }
  r.resize(out);
}

Status GrammarBuilder::AddElements(size_t n) {
  n_elements_ += n;
  if (n_elements_ > kMaxElements) {
    return InvalidArgument("grammar too large: more than " + std::to_string(kMaxElements) +
                           " elements after expanding repetitions");
  }
  return Status::Ok();
}

Result<int32_t> GrammarBuilder::RuleId(std::string_view name, int line, int col) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  if (rules_.size() >= kMaxRules) {
    return InvalidArgument("grammar too large: more than " + std::to_string(kMaxRules) + " rules");
  }
  Rule r;
  r.name = std::string(name);
  r.ref_line = line;
  r.ref_col = col;
  rules_.push_back(std::move(r));
  const auto id = static_cast<int32_t>(rules_.size() - 1);
  by_name_.emplace(std::string(name), id);
  return id;
}

Result<int32_t> GrammarBuilder::NewRule(int32_t owner, std::vector<Sequence> alts) {
  if (rules_.size() >= kMaxRules) {
    return InvalidArgument("grammar too large: more than " + std::to_string(kMaxRules) + " rules");
  }
  size_t n = 0;
  for (const auto& a : alts) n += a.size() + 1;
  KVMEM_RETURN_IF_ERROR(AddElements(n));
  Rule r;
  r.name = rules_[owner].name + "_" + std::to_string(rules_.size());
  r.alts = std::move(alts);
  r.defined = true;
  rules_.push_back(std::move(r));
  return static_cast<int32_t>(rules_.size() - 1);
}

Status GrammarBuilder::Define(int32_t rule, std::vector<Sequence> alts, int line, int col) {
  Rule& r = rules_[rule];
  if (r.defined) {
    return InvalidArgument("line " + std::to_string(line) + ", column " + std::to_string(col) +
                           ": rule '" + r.name + "' is defined twice");
  }
  size_t n = 0;
  for (const auto& a : alts) n += a.size() + 1;
  KVMEM_RETURN_IF_ERROR(AddElements(n));
  r.alts = std::move(alts);
  r.defined = true;
  return Status::Ok();
}

int32_t GrammarBuilder::AddClass(CharClass c) {
  NormalizeClass(&c);
  classes_.push_back(std::move(c));
  return static_cast<int32_t>(classes_.size() - 1);
}

Status GrammarBuilder::Repeat(int32_t owner, Sequence* seq, size_t atom_start, int min, int max) {
  if (min < 0 || min > kMaxRepetition || max > kMaxRepetition) {
    return InvalidArgument("repetition count above the limit of " + std::to_string(kMaxRepetition));
  }
  if (max >= 0 && max < min) return InvalidArgument("repetition {m,n} with n < m");
  if (seq->size() == atom_start) return InvalidArgument("repetition of an empty literal");
  Element atom = (*seq)[atom_start];
  if (seq->size() - atom_start > 1) {  // a literal of several characters: one rule
    Sequence lit(seq->begin() + static_cast<ptrdiff_t>(atom_start), seq->end());
    KVMEM_ASSIGN_OR_RETURN(int32_t r, NewRule(owner, {std::move(lit)}));
    atom = {Element::Kind::kRule, r};
  }
  seq->resize(atom_start);
  const size_t optional = max < 0 ? 0 : static_cast<size_t>(max - min);
  KVMEM_RETURN_IF_ERROR(AddElements(static_cast<size_t>(min) + 1));
  seq->insert(seq->end(), static_cast<size_t>(min), atom);
  if (max < 0) {
    // star ::= atom star | ""   (a tail call: the matcher's stacks do not grow)
    KVMEM_ASSIGN_OR_RETURN(int32_t star, NewRule(owner, {}));
    rules_[star].alts = {{atom, {Element::Kind::kRule, star}}, {}};
    KVMEM_RETURN_IF_ERROR(AddElements(4));
    seq->push_back({Element::Kind::kRule, star});
  } else if (optional > 0) {
    // opt_1 ::= atom | "";  opt_k ::= atom opt_{k-1} | ""
    int32_t prev = -1;
    for (size_t k = 0; k < optional; ++k) {
      Sequence first = {atom};
      if (prev >= 0) first.push_back({Element::Kind::kRule, prev});
      KVMEM_ASSIGN_OR_RETURN(prev, NewRule(owner, {std::move(first), {}}));
    }
    seq->push_back({Element::Kind::kRule, prev});
  }
  return Status::Ok();
}

Result<Grammar> GrammarBuilder::Finish(std::string_view root) {
  for (const Rule& r : rules_) {
    if (!r.defined) {
      return InvalidArgument("line " + std::to_string(r.ref_line) + ", column " +
                             std::to_string(r.ref_col) + ": rule '" + r.name +
                             "' is used but never defined");
    }
  }
  auto it = by_name_.find(std::string(root));
  if (it == by_name_.end()) {
    return InvalidArgument("the grammar has no rule '" + std::string(root) + "'");
  }
  Grammar g;
  g.root_ = it->second;
  g.classes_ = std::move(classes_);
  g.elements_.reserve(n_elements_);
  g.rule_alts_.resize(rules_.size());
  g.rule_names_.reserve(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    g.rule_names_.push_back(std::move(rules_[r].name));
    for (const Sequence& alt : rules_[r].alts) {
      g.rule_alts_[r].push_back(static_cast<int32_t>(g.elements_.size()));
      g.elements_.insert(g.elements_.end(), alt.begin(), alt.end());
      g.elements_.push_back({Element::Kind::kEnd, 0});
    }
  }
  rules_.clear();
  by_name_.clear();
  KVMEM_RETURN_IF_ERROR(CheckGrammar(g));
  return g;
}

}  // namespace kvmem::engine::grammar
