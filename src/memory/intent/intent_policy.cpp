#include "memory/intent/intent_policy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/base64.h"
#include "engine/forward.h"
#include "memory/eviction/attention_scores.h"
#include "memory/eviction/h2o.h"
#include "memory/intent/slot_map_eviction.h"
#include "memory/store/prefix_match.h"

namespace kvmem::memory {
namespace {

using Type = ConfigField::Type;
using Scorer = IntentKvConfig::Scorer;

constexpr int kSinks = 4;           // StreamingLLM
constexpr int kSnapWindow = 32;     // SnapKV's W
constexpr int kSnapKernel = 7;      // SnapKV's max-pool kernel
constexpr double kH2oRecent = 0.5;  // H2O's recent share

const std::vector<std::string>& ScorerNames() {
  static const std::vector<std::string> names = {"intentkv", "query", "streaming", "snapkv", "h2o"};
  return names;
}

std::vector<ConfigField> Fields() {
  return {
      {"budget",
       Type::kInt,
       2048,
       1,
       1 << 20,
       {},
       0,
       "C: live history rows kept once the conversation passes them (forced rows count first)"},
      {"lambda", Type::kNumber, 0.5, 0, 20, {}, 0, "the QueryMemory's decay rate (Eq. 2)"},
      {"protect_prefix",
       Type::kString,
       "system",
       0,
       0,
       {"system", "none"},
       0,
       "rows never pruned: the system message (and what precedes the first message), or none"},
      {"scorer", Type::kString, "intentkv", 0, 0, ScorerNames(), 0,
       "what ranks history rows: the session's QueryMemory (IntentKV), the current query only, "
       "StreamingLLM (4 sinks + recent), SnapKV (W=32, kernel 7), H2O (accumulated attention)"},
      {"layout",
       Type::kString,
       "dead_slot",
       0,
       0,
       {"dead_slot", "compact"},
       0,
       "dropped rows become dead slots (the prefix still matches) or kept rows are compacted "
       "and re-rotated (the classic layout)"},
  };
}

Result<Json> Parse(const PolicyEnv&, const Json& config) {
  const std::vector<ConfigField> fields = Fields();
  return ReadConfig("intentkv", fields, config, DefaultConfig(fields));
}

IntentKvConfig ConfigOf(const Json& c) {
  IntentKvConfig k;
  k.budget = c.at("budget").get<int64_t>();
  k.lambda = c.at("lambda").get<double>();
  k.protect_system = c.at("protect_prefix").get<std::string>() == "system";
  const std::string s = c.at("scorer").get<std::string>();
  const auto& names = ScorerNames();
  k.scorer = static_cast<Scorer>(std::find(names.begin(), names.end(), s) - names.begin());
  k.compact = c.at("layout").get<std::string>() == "compact";
  return k;
}

// Ascending indices where mask holds, as [begin, end, ...] of offsets (bytes) given per index.
Json ByteRanges(std::span<const uint8_t> mask, std::span<const size_t> ends) {
  Json out = Json::array();
  for (size_t i = 0; i < mask.size(); ++i) {
    const size_t b = i == 0 ? 0 : ends[i - 1];
    if (!mask[i] || ends[i] == b) continue;
    if (!out.empty() && out.back().get<size_t>() == b) {
      out.back() = ends[i];
    } else {
      out.push_back(b);
      out.push_back(ends[i]);
    }
  }
  return out;
}

std::string B64(const void* p, size_t n) {
  return Base64Encode(std::string_view(static_cast<const char*>(p), n));
}

}  // namespace

PolicyKind IntentKvPolicyKind() {
  PolicyKind k = PromptCacheKind(
      "intentkv",
      "IntentKV: the full cache pruned to a budget of history rows ranked against the session's "
      "cross-turn query memory; dropped rows become dead slots so later prompts still match the "
      "prefix (StreamingLLM, SnapKV and H2O as scorers, compaction as a layout)");
  k.fields = Fields();
  k.parse = Parse;
  // Compaction copies the kept rows beside the old ones before letting them go.
  k.rows_needed = [](const PolicyEnv& env, const Json& config) {
    return config.value("layout", "dead_slot") == "compact" ? 2 * env.n_ctx : env.n_ctx;
  };
  SetFactory<IntentKvPolicy>(&k);
  return k;
}

IntentKvPolicy::IntentKvPolicy(const PolicyEnv& env, kv::KvPool* pool, IntentKvConfig config,
                               StoredMemory stored)
    : FullPolicy(env, pool, std::move(stored.rows), std::move(stored.tokens),
                 std::move(stored.text)),
      config_(config),
      memory_(env.model->spec().n_layers, env.model->spec().n_heads, env.model->spec().head_dim_k) {
  live_.assign(tokens_.size(), 1);
  heavy_.assign(tokens_.size(), 0.0);
  conversation_ = text_;
}

Result<std::unique_ptr<IntentKvPolicy>> IntentKvPolicy::Make(const PolicyEnv& env,
                                                             const Json& config, kv::KvPool* pool,
                                                             StoredMemory stored) {
  Json state = std::move(stored.state);
  std::unique_ptr<IntentKvPolicy> p(
      new IntentKvPolicy(env, pool, ConfigOf(config), std::move(stored)));
  if (!state.empty()) KVMEM_RETURN_IF_ERROR(p->RestoreState(state));
  p->state_ = p->StateJson();
  return p;
}

Result<TurnPlan> IntentKvPolicy::Plan(const TurnInput& input) const {
  KVMEM_ASSIGN_OR_RETURN(TurnPlan plan, FullPolicy::Plan(input));
  // New rows go after the kept ones, into the block of the first new row: one whose storage
  // was given back (all its rows dead) cannot take them, so the plan keeps less.
  const int br = pool_->geometry().block_rows;
  int64_t keep = plan.kept_rows;
  if (keep > 0 && keep % br != 0 && !pool_->has_all_layers(kv::RowAt(*seq_, keep).block)) {
    keep = keep / br * br;
    size_t offset = 0;
    for (int64_t i = 0; i < keep; ++i) offset += env_.Piece(tokens_[i]).size();
    plan.kept_rows = keep;
    plan.kept_text_bytes = offset;
    plan.prefill = env_.tok->Encode(input.prompt_text.substr(offset), /*add_special=*/keep == 0,
                                    /*parse_special=*/true);
    if (plan.prefill.empty()) return InvalidArgument("the prompt is empty");
  }
  if (!input.focus.empty()) {
    const std::string_view rest = input.prompt_text.substr(plan.kept_text_bytes);
    const std::vector<int32_t> plain =
        env_.tok->Encode(rest, /*add_special=*/false, /*parse_special=*/true);
    const auto lead =
        static_cast<int64_t>(plan.prefill.size()) - static_cast<int64_t>(plain.size());
    Result<tokenizer::TokenSpan> span =
        tokenizer::FindTokenSpan(*env_.tok, rest, plain, input.focus);
    if (lead < 0 || !span.ok()) {
      return InvalidArgument(
          "'retrieval_query' is not in what the prompt adds to the agent's "
          "conversation");
    }
    plan.focus = {lead + span->begin, lead + span->end};
  }
  return plan;
}

std::vector<int64_t> IntentKvPolicy::Rank(std::span<const int64_t> candidates, int64_t n_keep,
                                          const TurnSpans& spans) {
  const size_t n = tokens_.size();
  std::vector<double> score(n, 0.0);
  switch (config_.scorer) {
    case Scorer::kIntentKv:
    case Scorer::kQuery: {
      const model::ModelSpec& spec = env_.model->spec();
      std::vector<float> enc(memory_.row_size(), 0.0f);
      for (size_t i = 0; i < enc.size(); ++i) {
        enc[i] = static_cast<float>(enc_sum_[i] / std::max<int64_t>(enc_rows_, 1));
      }
      std::span<const float> m;
      QueryMemory current(spec.n_layers, spec.n_heads, spec.head_dim_k, 1);
      if (config_.scorer == Scorer::kIntentKv) {
        const std::span<const float> before = memory_.Find(session_);
        saved_memory_ = std::vector<float>(before.begin(), before.end());
        m = memory_.Update(session_, enc, config_.lambda);
      } else {
        m = current.Update(0, enc, config_.lambda);  // Enc(q_t), unit-normalised
      }
      const std::vector<double> rule = RuleScores(*seq_, candidates, m, spec, env_.threads);
      for (size_t i = 0; i < candidates.size(); ++i) score[candidates[i]] = rule[i];
      return TopScored(candidates, score, n_keep);
    }
    case Scorer::kStreaming: {
      int sinks = 0;
      for (size_t i = 0; i < n; ++i) {
        score[i] = static_cast<double>(i);
        if (live_[i] && sinks < kSinks) {
          score[i] = std::numeric_limits<double>::infinity();
          ++sinks;
        }
      }
      return TopScored(candidates, score, n_keep);
    }
    case Scorer::kSnapKv: {
      // 1-D max-pool of the window's attention over the rows in order (padding: the edge).
      const int half = kSnapKernel / 2;
      for (size_t i = 0; i < n; ++i) {
        double best = 0;
        for (int64_t j = std::max<int64_t>(0, int64_t(i) - half);
             j <= std::min<int64_t>(int64_t(n) - 1, int64_t(i) + half); ++j) {
          if (static_cast<size_t>(j) < window_.size()) best = std::max(best, window_[j]);
        }
        score[i] = best;
      }
      return TopScored(candidates, score, n_keep);
    }
    case Scorer::kH2o: {
      std::vector<double> s;
      for (int64_t c : candidates) s.push_back(heavy_[c]);
      const int64_t recent = std::llround(static_cast<double>(n_keep) * kH2oRecent);
      std::vector<int64_t> kept;
      for (int64_t i : H2oKeep(s, n_keep, std::min(recent, n_keep))) kept.push_back(candidates[i]);
      return kept;
    }
  }
  return {};
}

Result<PromptAccount> IntentKvPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  KeepPrefix(plan);
  live_.resize(tokens_.size(), 1);
  heavy_.resize(tokens_.size(), 0.0);
  saved_view_ = seq_->view().Clone();
  saved_live_ = live_;
  saved_heavy_ = heavy_;
  saved_memory_.reset();
  const std::span<const int32_t> ids = plan.prefill;
  const int64_t before = static_cast<int64_t>(tokens_.size());
  const int64_t n = before + static_cast<int64_t>(ids.size());  // the prompt's rows
  const int64_t body = n - 1;                                   // pruned before the last token

  // Where the prompt's parts lie, on its whole token stream; without message openers the
  // actionable span is what the client added to the conversation the agent held.
  std::vector<int32_t> all(tokens_);
  all.insert(all.end(), ids.begin(), ids.end());
  std::vector<size_t> ends(all.size());  // where each token's text ends in the prompt
  size_t at = 0;
  for (size_t i = 0; i < all.size(); ++i) ends[i] = at += env_.Piece(all[i]).size();
  const size_t held = store::MatchText(conversation_, plan.prompt_text).matched_bytes;
  const int64_t added = std::upper_bound(ends.begin(), ends.end(), held) - ends.begin();
  saved_conversation_ = conversation_;
  TurnSpans spans = FindTurnSpans(
      all, [this](int32_t id) { return env_.Piece(id); }, added);
  if (plan.focus.end >= 0) spans.action_begin = before + plan.focus.begin;
  session_ = SessionKey(all, spans);
  if (!config_.protect_system) spans.protect_end = 0;
  protect_rows_ = spans.protect_end;

  // Which prefilled tokens the scorer taps.
  int64_t tap_from = body;
  switch (config_.scorer) {
    case Scorer::kIntentKv:
    case Scorer::kQuery:
      tap_from = std::min(std::max(spans.action_begin, before), body);
      break;
    case Scorer::kSnapKv:
      tap_from = std::max(before, body - kSnapWindow);
      break;
    case Scorer::kH2o:
      tap_from = before;
      break;
    case Scorer::kStreaming:
      break;
  }
  std::vector<float> unused;  // the batcher gives every pass its last token's logits
  if (tap_from > before) {
    KVMEM_RETURN_IF_ERROR(Prefill(ids.first(static_cast<size_t>(tap_from - before)), &unused));
  }
  const model::ModelSpec& spec = env_.model->spec();
  enc_sum_.assign(memory_.row_size(), 0.0);
  enc_rows_ = 0;
  AttentionScores attention(spec);
  if (tap_from < body) {
    const bool q_tap = config_.scorer == Scorer::kIntentKv || config_.scorer == Scorer::kQuery;
    const size_t row = static_cast<size_t>(spec.n_heads) * spec.head_dim_k;
    const engine::LayerTap tap = [&](const engine::TapContext& t) {
      if (!q_tap) {
        attention.Add(t, *seq_, env_.threads);
        return;
      }
      const std::span<const float> q = t.q();  // (n_tokens, n_heads, head_dim_k)
      double* dst = enc_sum_.data() + static_cast<size_t>(t.layer()) * row;
      for (int i = 0; i < t.n_tokens(); ++i) {
        for (size_t j = 0; j < row; ++j) dst[j] += q[i * row + j];
      }
      if (t.layer() == 0) enc_rows_ += t.n_tokens();
    };
    KVMEM_RETURN_IF_ERROR(Prefill(
        ids.subspan(static_cast<size_t>(tap_from - before), static_cast<size_t>(body - tap_from)),
        nullptr, &tap));
  }
  live_.resize(tokens_.size(), 1);
  heavy_.resize(tokens_.size(), 0.0);
  // The tapped tokens' attention, summed over layers and KV heads: SnapKV's window scores, and
  // what H2O adds to its accumulated ones.
  window_.assign(tokens_.size(), 0.0);
  for (int l = 0; l < attention.n_layers(); ++l) {
    for (int g = 0; g < attention.n_kv_heads(); ++g) {
      const std::span<const double> s = attention.of(l, g);
      for (size_t i = 0; i < s.size() && i < window_.size(); ++i) window_[i] += s[i];
    }
  }
  if (config_.scorer == Scorer::kH2o) {
    for (size_t i = 0; i < window_.size(); ++i) heavy_[i] += window_[i];
  }

  // Eq. 1 once the live rows pass the budget.
  std::vector<int64_t> candidates;
  int64_t live = 0, forced = 0;
  for (int64_t i = 0; i < body; ++i) {
    if (!live_[i]) continue;
    ++live;
    const bool pinned = i < spans.protect_end || i >= spans.action_begin ||
                        (config_.scorer == Scorer::kSnapKv && i >= body - kSnapWindow);
    if (pinned) {
      ++forced;
    } else {
      candidates.push_back(i);
    }
  }
  std::vector<int64_t> dropped;
  if (live > config_.budget) {
    const int64_t n_keep = std::max<int64_t>(0, config_.budget - forced);
    const std::vector<int64_t> kept = Rank(candidates, n_keep, spans);
    std::set_difference(candidates.begin(), candidates.end(), kept.begin(), kept.end(),
                        std::back_inserter(dropped));
  }
  for (int64_t i : dropped) live_[i] = 0;
  // What the reply reads, as bytes of the prompt (before a compaction renumbers the rows).
  std::vector<uint8_t> reads(live_);
  reads.resize(all.size(), 1);
  detail_ = Json{{"live_prompt_bytes", ByteRanges(reads, ends)}};

  if (!config_.compact) {
    KillRows(dropped, seq_.get());
  } else if (!dropped.empty()) {
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < body; ++i) {
      if (live_[i]) keep.push_back(i);
    }
    KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<kv::KvSequence> packed,
                           CompactRows(*seq_, keep, env_.model->rope_specs()));
    saved_seq_ = std::move(seq_);
    seq_ = std::move(packed);
    saved_tokens_ = tokens_;
    saved_text_ = text_;
    std::vector<int32_t> kept_tokens;
    std::vector<double> kept_heavy;
    text_.clear();
    for (int64_t i : keep) {
      kept_tokens.push_back(tokens_[i]);
      kept_heavy.push_back(heavy_[i]);
      text_.append(env_.Piece(tokens_[i]));
    }
    tokens_ = std::move(kept_tokens);
    heavy_ = std::move(kept_heavy);
    live_.assign(tokens_.size(), 1);
  }
  KVMEM_RETURN_IF_ERROR(Prefill(ids.last(1), logits));
  live_.resize(tokens_.size(), 1);
  heavy_.resize(tokens_.size(), 0.0);
  // The prompt text is the client's byte for byte, unless compaction dropped some of it.
  if (!config_.compact || saved_seq_ == nullptr) text_.assign(plan.prompt_text);
  conversation_.assign(plan.prompt_text);

  const int64_t live_rows = std::count(live_.begin(), live_.end(), uint8_t{1});
  report_ = BaseReport(plan);
  report_["scorer"] = ScorerNames()[static_cast<size_t>(config_.scorer)];
  report_["layout"] = config_.compact ? "compact" : "dead_slot";
  report_["budget"] = config_.budget;
  report_["prompt_rows"] = n;
  report_["live_rows"] = live_rows;
  report_["dropped_rows"] = static_cast<int64_t>(dropped.size());
  report_["forced_rows"] = forced + 1;
  report_["dead_rows"] = static_cast<int64_t>(live_.size()) - live_rows;
  report_["kv_len_decode"] = live_rows;
  report_["prefix_hit"] = n > 0 ? static_cast<double>(plan.kept_rows) / n : 0.0;
  return PromptAccount{n, plan.kept_rows};
}

Status IntentKvPolicy::Step(int32_t token, std::vector<float>* logits) {
  KVMEM_RETURN_IF_ERROR(FullPolicy::Step(token, logits));
  conversation_.append(env_.Piece(token));
  return Status::Ok();
}

Status IntentKvPolicy::Commit() {
  KVMEM_RETURN_IF_ERROR(FullPolicy::Commit());
  live_.resize(tokens_.size(), 1);
  heavy_.resize(tokens_.size(), 0.0);
  int64_t freed = 0;
  if (!config_.compact) {
    const std::vector<size_t> blocks = FreeableBlocks(*seq_, live_, protect_rows_, {});
    FreeBlocks(blocks, seq_.get());
    freed = static_cast<int64_t>(blocks.size());
  }
  report_["freed_blocks"] = freed;
  saved_view_.reset();
  saved_seq_.reset();
  saved_memory_.reset();
  saved_tokens_.clear();
  saved_text_.clear();
  saved_conversation_.reset();
  state_ = StateJson();
  return Status::Ok();
}

void IntentKvPolicy::Abort() {
  if (saved_seq_ != nullptr) {
    seq_ = std::move(saved_seq_);
    tokens_ = std::move(saved_tokens_);
    text_ = std::move(saved_text_);
  }
  FullPolicy::Abort();
  if (saved_view_) {
    seq_->view() = std::move(*saved_view_);
    saved_view_.reset();
    live_ = saved_live_;
    heavy_ = saved_heavy_;
  }
  live_.resize(tokens_.size(), 1);
  heavy_.resize(tokens_.size(), 0.0);
  if (saved_memory_) memory_.Restore(session_, *saved_memory_);
  saved_memory_.reset();
  if (saved_conversation_) conversation_ = std::move(*saved_conversation_);
  saved_conversation_.reset();
}

Json IntentKvPolicy::StateJson() const {
  std::vector<int64_t> dead;
  for (size_t i = 0; i < live_.size(); ++i) {
    if (!live_[i]) dead.push_back(static_cast<int64_t>(i));
  }
  Json s = {{"dead", RowRangesJson(dead)}, {"protect_rows", protect_rows_}};
  if (config_.scorer == Scorer::kIntentKv) s["memory"] = memory_.ToJson();
  if (config_.scorer == Scorer::kH2o) {
    s["heavy"] = B64(heavy_.data(), heavy_.size() * sizeof(double));
  }
  if (conversation_ != text_) {  // compacted: text_ is less; base64, as it may cut a character
    s["conversation"] = B64(conversation_.data(), conversation_.size());
  }
  return s;
}

Status IntentKvPolicy::RestoreState(const Json& state) {
  const int64_t n = static_cast<int64_t>(tokens_.size());
  if (!state.is_object() || !state.contains("dead") || !state["dead"].is_array() ||
      state["dead"].size() % 2 != 0 || !state.contains("protect_rows") ||
      !state["protect_rows"].is_number_integer()) {
    return Corrupt("intentkv state: expected 'dead' (row ranges) and 'protect_rows'");
  }
  protect_rows_ = state["protect_rows"].get<int64_t>();
  if (protect_rows_ < 0 || protect_rows_ > n) {
    return Corrupt("intentkv state: protect_rows outside the cache");
  }
  std::vector<int64_t> dead;
  int64_t prev = 0;
  for (size_t k = 0; k < state["dead"].size(); k += 2) {
    const Json& b = state["dead"][k];
    const Json& e = state["dead"][k + 1];
    if (!b.is_number_integer() || !e.is_number_integer() || b.get<int64_t>() < prev ||
        e.get<int64_t>() <= b.get<int64_t>() || e.get<int64_t>() > n) {
      return Corrupt("intentkv state: 'dead' is not ascending ranges within the cache");
    }
    prev = e.get<int64_t>();
    for (int64_t i = b.get<int64_t>(); i < prev; ++i) dead.push_back(i);
  }
  for (int64_t i : dead) live_[i] = 0;
  KillRows(dead, seq_.get());

  if (state.contains("conversation")) {
    if (!state["conversation"].is_string()) {
      return Corrupt("intentkv state: 'conversation' is not base64 text");
    }
    KVMEM_ASSIGN_OR_RETURN(conversation_, Base64Decode(state["conversation"].get<std::string>(),
                                                       "intentkv state: conversation"));
  }
  if (config_.scorer == Scorer::kIntentKv && state.contains("memory")) {
    KVMEM_RETURN_IF_ERROR(memory_.FromJson(state["memory"]));
  }
  if (config_.scorer == Scorer::kH2o && state.contains("heavy")) {
    if (!state["heavy"].is_string()) return Corrupt("intentkv state: 'heavy' is not base64");
    KVMEM_ASSIGN_OR_RETURN(std::string bytes,
                           Base64Decode(state["heavy"].get<std::string>(), "intentkv state"));
    if (bytes.size() != static_cast<size_t>(n) * sizeof(double)) {
      return Corrupt("intentkv state: 'heavy' does not cover the cache");
    }
    std::memcpy(heavy_.data(), bytes.data(), bytes.size());
  }
  return Status::Ok();
}

Json IntentKvPolicy::Inspect() const {
  std::vector<size_t> ends(tokens_.size());
  std::vector<uint8_t> live(tokens_.size(), 1);
  size_t at = 0;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    ends[i] = at = std::min(text_.size(), at + env_.Piece(tokens_[i]).size());
    if (i < live_.size()) live[i] = live_[i];
  }
  Json parts = Json::array();
  for (size_t i = 0; i < live.size();) {
    size_t e = i;
    while (e < live.size() && !live[e]) ++e;
    if (e > i) {
      parts.push_back(
          {{"kind", "dropped"},
           {"tokens", {i, e}},
           {"bytes", TokenBytesJson(ends, static_cast<int64_t>(i), static_cast<int64_t>(e))}});
    }
    i = e + 1;
  }
  return Json{{"cached", ByteRanges(live, ends)}, {"parts", std::move(parts)}};
}

PersistedMemory IntentKvPolicy::Persist() const {
  PersistedMemory p = FullPolicy::Persist();
  p.state = state_;
  return p;
}

}  // namespace kvmem::memory
