// A TokenConstraint that holds a generation to a grammar: a Matcher over the tokenizer's
// TokenTable. The table is built once per tokenizer and shared by every request (see
// serve::EngineBackend); the grammar is compiled once per request.
// Not thread-safe: one per generated sequence.
#pragma once

#include <memory>

#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"
#include "engine/grammar/token_table.h"
#include "engine/token_constraint.h"

namespace kvmem::engine::grammar {

class GrammarConstraint final : public TokenConstraint {
 public:
  // `table` must outlive this object.
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, const TokenTable* table)
      : matcher_(std::move(grammar)), table_(table) {}

  bool Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;
  bool Done() const override { return matcher_.finished() || !matcher_.CanContinue(); }
  std::unique_ptr<TokenConstraint> Clone() const override {
    return std::make_unique<GrammarConstraint>(*this);
  }

 private:
  Matcher matcher_;
  const TokenTable* table_;
  TokenMask mask_;
};

}  // namespace kvmem::engine::grammar
