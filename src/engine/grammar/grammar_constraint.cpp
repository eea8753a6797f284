#include "engine/grammar/grammar_constraint.h"

namespace kvmem::engine::grammar {

bool GrammarConstraint::Mask(std::span<float> logits) {
  matcher_.FillMask(*table_, &mask_);
  if (mask_.Count() == 0) return false;
  mask_.Apply(logits);
  return true;
}

bool GrammarConstraint::Accept(int32_t token) {
  if (token < 0 || token >= table_->vocab_size() || !mask_.Test(token)) return false;
  return matcher_.AcceptToken(*table_, token);
}

}  // namespace kvmem::engine::grammar
