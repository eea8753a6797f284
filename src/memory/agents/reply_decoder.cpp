#include "memory/agents/reply_decoder.h"

#include <algorithm>
#include <memory>
#include <string>

#include "engine/forward.h"
#include "engine/stop_strings.h"
#include "tokenizer/harmony.h"

namespace kvmem::memory {
namespace {

// One past the highest position any list of the view reads: where a fork's tokens go.
int64_t EndPosition(const kv::KvView& view) {
  int64_t end = 0;
  for (int l = 0; l < view.n_layers(); ++l) {
    for (int g = 0; g < view.n_kv_heads(); ++g) {
      for (const kv::ViewRun& r : view.list(l, g)) {
        if (!r.dead()) end = std::max(end, r.first_pos + r.n_rows);
      }
    }
  }
  return end;
}

// Hands the reply's pieces to the callbacks, each with the logprobs gathered since the last.
class ReplyOutput {
 public:
  ReplyOutput(const TurnCallbacks& cb, int choice) : cb_(cb), choice_(choice) {}

  void AddLogprob(engine::TokenLogprob lp) { pending_.push_back(std::move(lp)); }
  // False when the client wants no more.
  bool Emit(std::string_view text) {
    if (cb_.on_delta) {
      if (text.empty() && pending_.empty()) return true;
      const bool more = cb_.on_delta({choice_, text, pending_});
      pending_.clear();
      return more;
    }
    return text.empty() || !cb_.on_text || cb_.on_text(text);
  }

 private:
  const TurnCallbacks& cb_;
  int choice_;
  std::vector<engine::TokenLogprob> pending_;
};

}  // namespace

ForkRows::ForkRows(const PolicyEnv& env, const kv::KvSequence& prompt)
    : env_(env), seq_(kv::KvSequence::Fork(prompt)), next_pos_(EndPosition(prompt.view())) {}

Status ForkRows::Step(int32_t token, std::vector<float>* logits) {
  const int32_t one[1] = {token};
  KVMEM_RETURN_IF_ERROR(env_.compute->Forward(seq_.get(), one, next_pos_, false, logits));
  ++next_pos_;
  return Status::Ok();
}

Status DecodeChoice(const tokenizer::Tokenizer& tok, ReplyRows& rows,
                    std::span<const int32_t> context, std::vector<float> logits,
                    const TurnParams& params, int choice, const TurnCallbacks& callbacks,
                    ChoiceEnd* out) {
  engine::SamplerConfig config = params.sampler;
  config.seed += static_cast<uint64_t>(choice);
  engine::Sampler sampler(config);
  engine::StopMatcher stops(params.stop);
  tokenizer::ReplyDecoder decoder(&tok, context, params.raw_reply);
  ReplyOutput output(callbacks, choice);
  std::vector<int32_t> history(context.begin(), context.end());
  out->end = TurnEnd::kLength;
  // Constrained decoding draws from masked logits; logprobs stay the model's raw distribution.
  std::unique_ptr<engine::TokenConstraint> constraint =
      params.constraint != nullptr ? params.constraint->Clone() : nullptr;
  std::vector<float> masked;
  for (int i = 0; i < params.max_tokens; ++i) {
    if (constraint != nullptr) {
      masked = logits;
      if (!constraint->Mask(masked)) break;
    }
    const int32_t t = sampler.Sample(constraint != nullptr ? masked : logits, history);
    if (constraint != nullptr && !constraint->Accept(t)) break;
    ++out->completion_tokens;
    if (tok.IsEndOfGeneration(t)) {
      out->end = TurnEnd::kEndOfTurn;
      break;
    }
    if (params.logprobs >= 0) output.AddLogprob(engine::LogprobOf(logits, t, params.logprobs));
    history.push_back(t);
    auto piece = decoder.Push(t);
    if (!piece.ok()) return piece.status();
    const std::string text = stops.Push(*piece);
    if (!text.empty() && !output.Emit(text)) {
      out->end = TurnEnd::kCancelled;
      return Status::Ok();
    }
    if (rows.CanStep()) out->unfed_token = t;  // until it is fed below
    if (stops.stopped()) {
      out->end = TurnEnd::kStopSequence;
      out->stop_sequence = stops.matched();
      break;
    }
    if (constraint != nullptr && constraint->Done()) {
      out->end = TurnEnd::kEndOfTurn;  // the grammar is complete: only the end could follow
      break;
    }
    if (i + 1 == params.max_tokens || !rows.CanStep()) break;
    out->unfed_token = -1;
    KVMEM_RETURN_IF_ERROR(rows.Step(t, &logits));
  }
  const std::string rest = stops.stopped() ? "" : stops.Push(decoder.Flush()) + stops.Flush();
  output.Emit(rest);
  return Status::Ok();
}

}  // namespace kvmem::memory
