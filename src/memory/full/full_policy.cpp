#include "memory/full/full_policy.h"

#include <algorithm>
#include <optional>

#include "engine/forward.h"

namespace kvmem::memory {

FullPolicy::FullPolicy(const PolicyEnv& env, kv::KvPool* pool, std::unique_ptr<kv::KvSequence> rows,
                       std::vector<int32_t> tokens, std::string text)
    : env_(env),
      pool_(pool),
      seq_(rows ? std::move(rows) : std::make_unique<kv::KvSequence>(pool)),
      tokens_(std::move(tokens)),
      text_(std::move(text)) {
  // Sliding-window rows are given back at Commit, not by each pass: an aborted turn (a question
  // asked of the memory, a failed request) leaves the cached prefix readable.
  seq_->set_window_release(false);
}

Result<TurnPlan> FullPolicy::Plan(const TurnInput& input) const {
  const std::string_view text = input.prompt_text;
  TurnPlan plan;
  const store::TextMatch m = store::MatchText(text_, text);
  plan.match = m.kind;
  auto piece = [this](int32_t id) { return env_.Piece(id); };
  int64_t keep = store::TokensWithinText(tokens_, text, m.matched_bytes, piece);
  if (m.kind == store::PrefixMatchKind::kDiverge && m.ratio < env_.min_diverge_ratio) keep = 0;
  size_t offset = 0;
  for (int64_t i = 0; i < keep; ++i) offset += env_.Piece(tokens_[i]).size();
  std::vector<int32_t> ids;
  if (keep > 0 && offset == text.size()) {
    // Everything is cached: recompute the last token, whose logits start the reply.
    --keep;
    offset -= env_.Piece(tokens_[keep]).size();
    ids.push_back(tokens_[keep]);
  }
  // Sliding-window layers may have released rows the first new token would read.
  const model::ModelSpec& spec = env_.model->spec();
  for (int l = 0; l < spec.n_layers && keep > 0; ++l) {
    const int64_t released = seq_->released_through(l);
    const int w = spec.layers[l].sliding_window;
    if (w > 0 && released != kv::kNoPosition && keep - w < released) keep = 0;
  }
  if (keep == 0) {
    offset = 0;
    ids = env_.tok->Encode(text, /*add_special=*/true, /*parse_special=*/true);
  } else if (ids.empty()) {
    ids = env_.tok->Encode(text.substr(offset), /*add_special=*/false, /*parse_special=*/true);
  }
  if (ids.empty()) return InvalidArgument("the prompt is empty");
  const int64_t total = keep + static_cast<int64_t>(ids.size());
  if (total >= env_.n_ctx) {
    return OutOfRange("the prompt has " + std::to_string(total) + " tokens; the context holds " +
                      std::to_string(env_.n_ctx) + " (with room for at least one generated token)");
  }
  plan.kept_rows = keep;
  plan.kept_text_bytes = offset;
  plan.prefill = std::move(ids);
  plan.prompt_text = text;
  return plan;
}

void FullPolicy::KeepPrefix(const TurnPlan& plan) {
  if (plan.kept_rows == 0) {
    seq_ = std::make_unique<kv::KvSequence>(pool_);  // frees the old rows
    seq_->set_window_release(false);
  } else {
    seq_->Truncate(plan.kept_rows);
  }
  tokens_.resize(plan.kept_rows);
  text_.resize(plan.kept_text_bytes);
  turn_rows_ = plan.kept_rows;
  turn_text_ = plan.kept_text_bytes;
}

Status FullPolicy::Prefill(std::span<const int32_t> ids, std::vector<float>* logits,
                           const engine::LayerTap* tap) {
  std::unique_lock<std::mutex> exclusive;  // a tap in every layer: the model to itself
  std::optional<engine::ForwardPass> fp;
  if (tap != nullptr) {
    exclusive = env_.compute->Exclusive();
    fp.emplace(*env_.model, env_.threads);
    fp->set_tap(*tap);
  }
  const size_t batch = static_cast<size_t>(env_.max_batch);
  for (size_t begin = 0; begin < ids.size(); begin += batch) {
    const auto part = ids.subspan(begin, std::min(batch, ids.size() - begin));
    Status st;
    if (fp) {
      engine::Batch b;
      b.tokens.assign(part.begin(), part.end());
      for (size_t i = 0; i < part.size(); ++i) b.positions.push_back(seq_->n_rows() + int64_t(i));
      st = fp->Begin(b, seq_.get());
      while (st.ok() && !fp->done()) fp->StepLayer();
      if (st.ok() && logits != nullptr && begin + part.size() == ids.size()) fp->Finish(logits);
    } else {
      st = env_.compute->Forward(seq_.get(), part, seq_->n_rows(), false, logits);
    }
    if (!st.ok()) {
      seq_->Truncate(static_cast<int64_t>(tokens_.size()));
      return st;
    }
    tokens_.insert(tokens_.end(), part.begin(), part.end());
    for (int32_t id : part) text_.append(env_.Piece(id));
  }
  return Status::Ok();
}

Json FullPolicy::BaseReport(const TurnPlan& plan) const {
  return Json{{"match", store::PrefixMatchKindName(plan.match)},
              {"cached_tokens", plan.kept_rows},
              {"prefill_tokens", static_cast<int64_t>(plan.prefill.size())},
              {"kv_len_decode", seq_->n_rows()}};
}

Result<PromptAccount> FullPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  KeepPrefix(plan);
  KVMEM_RETURN_IF_ERROR(Prefill(plan.prefill, logits));
  // The prompt text is the client's, byte for byte (the pieces spell it; this also covers a
  // BOS-less suffix whose pieces were checked only up to the match).
  text_.assign(plan.prompt_text);
  report_ = BaseReport(plan);
  return PromptAccount{seq_->n_rows(), plan.kept_rows};
}

bool FullPolicy::CanStep() const { return seq_->n_rows() + 1 < env_.n_ctx; }

Status FullPolicy::Step(int32_t token, std::vector<float>* logits) {
  const int32_t one[] = {token};
  KVMEM_RETURN_IF_ERROR(env_.compute->Forward(seq_.get(), one, seq_->n_rows(), false, logits));
  tokens_.push_back(token);
  text_.append(env_.Piece(token));
  return Status::Ok();
}

Status FullPolicy::Commit() {
  engine::ReleaseOutOfWindow(env_.model->spec(), seq_.get(), seq_->n_rows());
  report_["kv_rows"] = seq_->n_rows();
  turn_rows_ = -1;
  return Status::Ok();
}

void FullPolicy::Abort() {
  if (turn_rows_ >= 0) {
    tokens_.resize(static_cast<size_t>(turn_rows_));
    text_.resize(turn_text_);
  }
  seq_->Truncate(static_cast<int64_t>(tokens_.size()));
  turn_rows_ = -1;
}

PersistedMemory FullPolicy::Persist() const {
  PersistedMemory p;
  p.rows = seq_.get();
  p.tokens = tokens_;
  p.text = text_;
  return p;
}

}  // namespace kvmem::memory
