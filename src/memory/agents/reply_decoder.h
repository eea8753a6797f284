// Decoding one choice of a turn's reply: sample, stream the text (stop sequences removed) with
// each token's logprobs, feed the token back, until the budget, an end-of-generation token, a
// stop sequence, the context's end or the client says stop. What it decodes on is a ReplyRows:
// the memory policy's open turn, or a fork of the prompt's rows for the choices of n > 1.
// Internal to memory/agents. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_sequence.h"
#include "memory/agents/turn.h"
#include "memory/policy/memory_policy.h"
#include "tokenizer/tokenizer.h"

namespace kvmem::memory {

class ReplyRows {
 public:
  virtual ~ReplyRows() = default;
  // Whether one more token fits the context.
  virtual bool CanStep() const = 0;
  // Feeds `token`; logits: (n_vocab) of what follows it.
  virtual Status Step(int32_t token, std::vector<float>* logits) = 0;
};

// The policy's open turn (the reply becomes part of the memory at Commit).
class PolicyRows final : public ReplyRows {
 public:
  explicit PolicyRows(MemoryPolicy* policy) : policy_(policy) {}
  bool CanStep() const override { return policy_->CanStep(); }
  Status Step(int32_t token, std::vector<float>* logits) override {
    return policy_->Step(token, logits);
  }

 private:
  MemoryPolicy* policy_;
};

// A fork of a prefilled prompt's rows (kv::KvSequence::Fork): its tokens go at the positions
// after the prompt's last one, in rows of its own that are freed with it.
class ForkRows final : public ReplyRows {
 public:
  ForkRows(const PolicyEnv& env, const kv::KvSequence& prompt);
  bool CanStep() const override { return next_pos_ + 1 < env_.n_ctx; }
  Status Step(int32_t token, std::vector<float>* logits) override;

 private:
  const PolicyEnv& env_;
  std::unique_ptr<kv::KvSequence> seq_;
  int64_t next_pos_;  // position of the next token fed
};

// Decodes choice `choice` from `logits` (those of the prompt's last token; consumed), sampling
// with params.sampler's seed + choice. `context` is what the repetition penalty looks back over.
Status DecodeChoice(const tokenizer::Tokenizer& tok, ReplyRows& rows,
                    std::span<const int32_t> context, std::vector<float> logits,
                    const TurnParams& params, int choice, const TurnCallbacks& callbacks,
                    ChoiceEnd* out);

}  // namespace kvmem::memory
