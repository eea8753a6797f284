#include "memory/prefix/prefix_cached_policy.h"

#include <algorithm>

namespace kvmem::memory {

PrefixCachedPolicy::PrefixCachedPolicy(const PolicyEnv& env, prefix::PrefixCache* cache,
                                       std::string tenant, int64_t reserve_rows)
    : env_(env),
      cache_(cache),
      tenant_(std::move(tenant)),
      reserve_rows_(reserve_rows),
      empty_(std::make_unique<kv::KvSequence>(cache->pool())) {}

PrefixCachedPolicy::~PrefixCachedPolicy() { Abort(); }

Result<TurnPlan> PrefixCachedPolicy::Plan(const TurnInput& input) const {
  TurnPlan plan;
  plan.match = store::MatchText({}, input.prompt_text).kind;  // what `none` reports
  plan.prefill = env_.tok->Encode(input.prompt_text, /*add_special=*/true, /*parse_special=*/true);
  if (plan.prefill.empty()) return InvalidArgument("the prompt is empty");
  const auto total = static_cast<int64_t>(plan.prefill.size());
  if (total >= env_.n_ctx) {
    return OutOfRange("the prompt has " + std::to_string(total) + " tokens; the context holds " +
                      std::to_string(env_.n_ctx) + " (with room for at least one generated token)");
  }
  plan.prompt_text = input.prompt_text;
  return plan;
}

Result<PromptAccount> PrefixCachedPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  Abort();
  const std::span<const int32_t> ids = plan.prefill;
  const auto n = static_cast<int64_t>(ids.size());
  // At most n - 1 tokens come from the cache: the last is computed for its logits.
  KVMEM_ASSIGN_OR_RETURN(
      turn_, cache_->Begin(tenant_, ids, n - 1, std::min(n + reserve_rows_, 2 * env_.n_ctx)));
  const int64_t matched = turn_->matched();
  tokens_.assign(ids.begin(), ids.begin() + matched);
  const size_t batch = static_cast<size_t>(env_.max_batch);
  const std::span<const int32_t> rest = ids.subspan(static_cast<size_t>(matched));
  for (size_t begin = 0; begin < rest.size(); begin += batch) {
    const auto part = rest.subspan(begin, std::min(batch, rest.size() - begin));
    KVMEM_RETURN_IF_ERROR(
        env_.compute->Forward(turn_->seq(), part, turn_->next_position(), false, logits));
    tokens_.insert(tokens_.end(), part.begin(), part.end());
  }
  report_ = Json{{"match", matched > 0 ? "prefix_cache" : "none"},
                 {"cached_tokens", matched},
                 {"prefill_tokens", n - matched},
                 {"kv_len_decode", n}};
  return PromptAccount{n, matched};
}

bool PrefixCachedPolicy::CanStep() const {
  return turn_ != nullptr && turn_->next_position() + 1 < env_.n_ctx;
}

Status PrefixCachedPolicy::Step(int32_t token, std::vector<float>* logits) {
  if (turn_ == nullptr) return FailedPrecondition("no open turn");
  const int32_t one[] = {token};
  KVMEM_RETURN_IF_ERROR(
      env_.compute->Forward(turn_->seq(), one, turn_->next_position(), false, logits));
  tokens_.push_back(token);
  return Status::Ok();
}

Status PrefixCachedPolicy::Commit() {
  if (turn_ == nullptr) return FailedPrecondition("no open turn");
  report_["kv_rows"] = turn_->next_position();
  turn_->Commit(tokens_);
  turn_.reset();
  return Status::Ok();
}

void PrefixCachedPolicy::Abort() { turn_.reset(); }

PersistedMemory PrefixCachedPolicy::Persist() const {
  PersistedMemory p;
  p.rows = turn_ != nullptr ? turn_->seq() : empty_.get();
  p.tokens = tokens_;
  return p;
}

}  // namespace kvmem::memory
