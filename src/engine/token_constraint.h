// The seam through which a decoding loop restricts what may be sampled next (constrained
// decoding: response_format, tool calls, a client's grammar). The loop asks for the mask before
// each draw and reports the token it drew; what decides is the implementation's business
// (engine/grammar/grammar_constraint.h).
// Not thread-safe: one constraint per generated sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace kvmem::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Sets the logits of the tokens that may not come next to -infinity. False when no token
  // may come next: the loop ends the generation without drawing.
  virtual bool Mask(std::span<float> logits) = 0;
  // Records the drawn token. False when it was not allowed (a sampler that drew a masked token
  // through rounding): the loop ends the generation.
  virtual bool Accept(int32_t token) = 0;
  // Nothing but the end of generation may follow: the loop ends the turn without a forward pass
  // for the end-of-generation token.
  virtual bool Done() const = 0;
  // An independent copy of the current state (n > 1 choices each decode under their own).
  virtual std::unique_ptr<TokenConstraint> Clone() const = 0;
};

}  // namespace kvmem::engine
