#include "memory/agents/agent_runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>

#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"
#include "engine/forward.h"
#include "engine/prompt_score.h"
#include "kv/kv_sequence.h"
#include "memory/agents/agent_slot.h"
#include "memory/agents/reply_decoder.h"
#include "memory/prefix/prefix_cached_policy.h"

namespace kvmem::memory {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SlotName(const store::AgentKey& key) { return key.tenant + "/" + key.id; }

// A turn's detail as its record keeps it: whole when it holds at most kMaxDetailValues values.
Json BoundedDetail(Json detail) {
  std::vector<const Json*> open{&detail};
  size_t values = 0;
  while (!open.empty() && values <= kMaxDetailValues) {
    const Json* v = open.back();
    open.pop_back();
    if (!v->is_structured()) {
      ++values;
      continue;
    }
    for (const Json& child : *v) open.push_back(&child);
  }
  if (values <= kMaxDetailValues) return detail;
  return Json{{"omitted", "what the turn read holds more than " + std::to_string(kMaxDetailValues) +
                              " values"}};
}

}  // namespace

const char* OnDivergeName(OnDiverge d) {
  switch (d) {
    case OnDiverge::kFork:
      return "fork";
    case OnDiverge::kReplace:
      return "replace";
    case OnDiverge::kReject:
      return "reject";
  }
  return "?";
}

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kMiss:
      return "miss";
    case Tier::kHot:
      return "hot";
    case Tier::kWarm:
      return "warm";
    case Tier::kCold:
      return "cold";
  }
  return "?";
}

// A turn whose prompt diverged from the agent's conversation and which then changes nothing
// (refused, failed, cancelled): its prefill may have cut the rows the agent held, so the memory
// in RAM is dropped and the next turn reloads the conversation from the store (its manifest is
// still the one before this turn), and the checkpoint a fork made of that manifest goes. Unless
// Keep() is called; nothing to do without a store or a divergence.
class AgentRuntime::DivergedTurn {
 public:
  DivergedTurn(store::AgentStore* store, const store::AgentKey* key, Slot* slot,
               const Divergence& d)
      : store_(d.diverged ? store : nullptr), key_(key), slot_(slot), checkpoint_(d.checkpoint) {}
  DivergedTurn(const DivergedTurn&) = delete;
  DivergedTurn& operator=(const DivergedTurn&) = delete;
  ~DivergedTurn() {
    if (store_ == nullptr) return;
    slot_->LockedDrop();
    if (checkpoint_.empty()) return;
    Status st = store_->DeleteCheckpoint(*key_, checkpoint_);
    if (!st.ok()) KVMEM_LOG_WARN("%s", st.ToString().c_str());
  }
  void Keep() { store_ = nullptr; }

 private:
  store::AgentStore* store_;
  const store::AgentKey* key_;
  Slot* slot_;
  std::string checkpoint_;
};

// Holds the agent's ticket: turns of one agent run one at a time, in arrival order.
class AgentRuntime::Turn {
 public:
  explicit Turn(Slot& s) : s_(s) {
    std::unique_lock<std::mutex> l(s_.mu);
    const uint64_t mine = s_.next_ticket++;
    s_.cv.wait(l, [&] { return s_.serving == mine; });
  }
  ~Turn() {
    {
      std::lock_guard<std::mutex> l(s_.mu);
      ++s_.serving;
    }
    s_.cv.notify_all();
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

 private:
  Slot& s_;
};

AgentRuntime::AgentRuntime(const model::Model& model, const tokenizer::Tokenizer& tok,
                           ThreadPool* threads, store::AgentStore* store,
                           AgentRuntimeOptions options)
    : model_(model),
      tok_(tok),
      threads_(threads),
      store_(store),
      options_(options),
      batcher_(model, threads, [&] {
        engine::StepBatcher::Options b = options.batching;
        b.max_step_tokens = options.max_batch;
        return b;
      }()) {
  const int64_t train = model.spec().n_ctx_train;
  n_ctx_ = options_.n_ctx > 0 ? std::min<int64_t>(options_.n_ctx, train) : train;
  env_.model = &model_;
  env_.tok = &tok_;
  env_.threads = threads_;
  env_.compute = &batcher_;
  env_.n_ctx = n_ctx_;
  env_.max_batch = options_.max_batch;
  env_.min_diverge_ratio = options_.min_diverge_ratio;
  env_.max_history_tokens = options_.max_history_tokens;
  env_.model_fingerprint = options_.model_fingerprint;
  env_.presets_dir = options_.presets_dir;
  env_.encoder = options_.encoder;
  default_memory_ = *ParseMemorySpec(env_, "full", Json::object());
  const kv::KvPool probe(model.kv_geometry(options_.block_rows), 0, options_.formats);
  chunks_ = std::make_unique<kv::LayerChunks>(probe.layer_bytes(), options_.hot_budget_bytes);
  if (options_.prefix_cache_bytes > 0) {
    const int64_t turn_blocks =
        (n_ctx_ + prefix::PrefixCache::kBlockRows - 1) / prefix::PrefixCache::kBlockRows;
    prefix_cache_ = std::make_unique<prefix::PrefixCache>(
        model.kv_geometry(prefix::PrefixCache::kBlockRows), options_.formats,
        options_.prefix_cache_bytes,
        static_cast<int>(turn_blocks * std::max(options_.prefix_cache_room_turns, 1)));
  }
}

AgentRuntime::~AgentRuntime() = default;

Status AgentRuntime::Warmup() {
  chunks_->Reserve(options_.prefault_bytes);
  kv::KvPool pool(model_.kv_geometry(options_.block_rows), 1, options_.formats, chunks_.get());
  kv::KvSequence seq(&pool);
  const int32_t one[] = {tok_.bos_id() >= 0 ? tok_.bos_id() : 0};
  std::vector<float> logits;
  return batcher_.Forward(&seq, one, 0, false, &logits);
}

Result<MemorySpec> AgentRuntime::ValidateMemory(std::string_view policy, const Json& config) const {
  return ParseMemorySpec(env_, policy, config);
}

Status AgentRuntime::SetDefaultMemory(std::string_view policy, const Json& config) {
  KVMEM_ASSIGN_OR_RETURN(default_memory_, ValidateMemory(policy, config));
  return Status::Ok();
}

std::shared_ptr<AgentRuntime::Slot> AgentRuntime::GetSlot(const store::AgentKey& key) {
  std::lock_guard<std::mutex> l(registry_mu_);
  std::shared_ptr<Slot>& s = slots_[SlotName(key)];
  if (!s) {
    s = std::make_shared<Slot>();
    s->key = key;
  }
  return s;
}

Status AgentRuntime::CreateMemory(Slot& slot, int64_t extra_rows) {
  const int block = options_.block_rows;
  const int64_t rows = slot.spec.kind->rows_needed(env_, slot.spec.config) + extra_rows;
  slot.pool = std::make_unique<kv::KvPool>(model_.kv_geometry(block),
                                           static_cast<int>((rows + block - 1) / block),
                                           options_.formats, chunks_.get());
  Result<std::unique_ptr<MemoryPolicy>> p =
      slot.spec.kind->create(env_, slot.spec.config, slot.pool.get());
  if (!p.ok()) {
    slot.pool.reset();
    return p.status();
  }
  slot.policy = std::move(*p);
  return Status::Ok();
}

Status AgentRuntime::LoadMemory(const store::AgentKey& key, Slot& slot, const MemorySpec& spec,
                                std::string_view checkpoint) {
  const int block = options_.block_rows;
  const int64_t rows = spec.kind->rows_needed(env_, spec.config);
  auto pool = std::make_unique<kv::KvPool>(model_.kv_geometry(block),
                                           static_cast<int>((rows + block - 1) / block),
                                           options_.formats, chunks_.get());
  StoredMemory stored;
  stored.rows = std::make_unique<kv::KvSequence>(pool.get());
  store::AgentRecord rec;
  KVMEM_RETURN_IF_ERROR(store_->Load(key, stored.rows.get(), &rec, checkpoint));
  const int64_t version = rec.version;
  stored.tokens = std::move(rec.tokens);
  stored.text = std::move(rec.text);
  stored.state = std::move(rec.memory.state);
  KVMEM_ASSIGN_OR_RETURN(std::unique_ptr<MemoryPolicy> p,
                         spec.kind->restore(env_, spec.config, pool.get(), std::move(stored)));
  slot.policy.reset();  // a memory in the slot goes before the pool it lives in
  slot.pool = std::move(pool);
  slot.policy = std::move(p);
  slot.store_version = version;
  return Status::Ok();
}

Result<Tier> AgentRuntime::Acquire(const store::AgentKey* key, Slot& slot, double* load_seconds,
                                   int64_t extra_rows) {
  if (slot.policy) {
    const Tier t = slot.policy->n_rows() == 0 ? Tier::kMiss : slot.arrival;
    slot.arrival = Tier::kHot;
    return t;
  }
  const std::string name = key ? SlotName(*key) : std::string("(anonymous)");
  const bool stored = key != nullptr && store_ != nullptr && store_->Contains(*key);
  if (stored) {
    // A manifest that cannot be read is handled with the cache below (as a rebuildable one).
    Result<store::MemoryRecord> record = store_->ReadMemory(*key);
    if (record.ok()) {
      Result<MemorySpec> spec = SpecFromRecord(env_, *record);
      if (!spec.ok()) return spec.status().WithContext("agent " + name);
      std::lock_guard<std::mutex> l(slot.mu);  // List reads it
      slot.spec = std::move(*spec);
      slot.has_spec = true;
    }
  }
  if (!slot.has_spec) {
    std::lock_guard<std::mutex> l(slot.mu);
    slot.spec = key ? default_memory_ : *ParseMemorySpec(env_, "none", Json::object());
    slot.has_spec = true;
  }
  slot.resident = true;
  slot.arrival = Tier::kHot;  // what the turns after this one find
  if (stored) {
    const auto t0 = Clock::now();
    Status st = LoadMemory(*key, slot, slot.spec);
    *load_seconds = SecondsSince(t0);
    if (st.ok()) return Tier::kWarm;
    // A read that failed (EIO) says nothing about the files: the turn fails and the next one
    // tries again. Removing them would lose the agent's checkpoints, which no prompt holds.
    if (st.code() == ErrorCode::kIo || !slot.spec.kind->rebuildable_from_prompt) {
      // The memory is more than the prompts hold: keep the files for a person to see.
      slot.LockedDrop();
      return st.WithContext("agent " + name + ": stored memory not usable");
    }
    // A cache this model cannot use (corrupt, another format or model) is removed and replaced
    // at the end of this turn; the conversation itself is in the prompt, so nothing is lost.
    // (Removing it matters: Save reuses block files by their content name, so a damaged file
    // left in place would be named again.)
    KVMEM_LOG_WARN("agent %s: stored cache not used: %s", name.c_str(), st.ToString().c_str());
    Status removed = store_->Delete(*key);
    if (!removed.ok()) {
      KVMEM_LOG_WARN("agent %s: removing the unusable cache: %s", name.c_str(),
                     removed.ToString().c_str());
    }
  }
  Status st = CreateMemory(slot, extra_rows);
  if (!st.ok()) {
    slot.LockedDrop();
    return st.WithContext("agent " + name);
  }
  return Tier::kMiss;
}

Result<TurnResult> AgentRuntime::RunTurn(const store::AgentKey* key, std::string_view prompt_text,
                                         const TurnParams& params, const TurnCallbacks& callbacks) {
  if (key != nullptr) KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(*key));
  if (params.n < 1) return InvalidArgument("n must be at least 1");
  if (params.logprobs > engine::kMaxTopLogprobs) {
    return InvalidArgument("at most " + std::to_string(engine::kMaxTopLogprobs) + " logprobs");
  }
  if (key != nullptr && params.n > 1) {
    return InvalidArgument("n > 1 needs an anonymous turn: an agent's memory keeps one reply");
  }
  if (key != nullptr && params.prompt_logprobs) {
    return InvalidArgument("prompt logprobs need an anonymous turn (an agent's prompt is cached)");
  }
  if (params.max_tokens < (params.prompt_logprobs ? 0 : 1)) {
    return InvalidArgument("max_tokens must be at least 1");
  }
  if (params.n > 1 && !callbacks.on_delta && callbacks.on_text) {
    return InvalidArgument("n > 1 needs the on_delta callback");
  }
  // Prompt chunks are shared round-robin over tenants, then agents; each anonymous turn is a
  // member of its own in group 0.
  static std::atomic<uint64_t> anonymous{0};
  const engine::StepBatcher::Scope fairness(
      key != nullptr ? Fnv1a64(key->tenant) : 0,
      key != nullptr ? Fnv1a64(key->id.data(), key->id.size(), Fnv1a64(key->tenant)) : ++anonymous);
  TurnResult r;
  if (params.prompt_logprobs) {
    KVMEM_RETURN_IF_ERROR(ScorePrompt(prompt_text, std::max(params.logprobs, 0), &r.prompt));
    if (params.max_tokens == 0) {  // scoring only: nothing is generated or kept
      if (callbacks.on_prompt) callbacks.on_prompt(r.prompt);
      r.end = TurnEnd::kLength;
      r.choices.assign(params.n, ChoiceEnd{TurnEnd::kLength, "", 0});
      return r;
    }
  }
  std::shared_ptr<Slot> slot = key ? GetSlot(*key) : std::make_shared<Slot>();
  Turn turn(*slot);
  std::optional<store::AgentLease> lease;
  const std::shared_ptr<Slot> keyed = slot;  // keeps the ticket's slot while a stand-in runs
  if (key != nullptr) {
    Result<std::optional<store::AgentLease>> held = HoldShared(*key, *slot);
    if (held.ok()) {
      if (held->has_value()) lease.emplace(std::move(**held));
    } else if (held.status().code() != ErrorCode::kIo) {
      return held.status();  // busy on another server: Unavailable
    } else if (!slot->has_spec || slot->spec.server_conversation) {
      // The prompt may not hold the conversation (a server-side one continues what the store
      // holds), or nobody here knows: not answered from the prompt alone.
      return Unavailable("the agent store cannot be reached, and agent '" + key->id +
                         "' may continue a conversation only it holds: " + held.status().message());
    } else {
      KVMEM_LOG_WARN(
          "agent %s: the store cannot be reached (%s); this turn is computed from "
          "its prompt alone and not saved",
          SlotName(*key).c_str(), held.status().ToString().c_str());
      slot->LockedDrop();  // another server may write it meanwhile
      key = nullptr;
      slot = std::make_shared<Slot>();
    }
  }
  // Choices of n > 1 decode one after another, each on a fork that holds only its own rows.
  const int64_t fork_rows = params.n > 1 ? params.max_tokens + options_.block_rows : 0;
  if (key == nullptr && prefix_cache_ != nullptr) {
    slot->policy = std::make_unique<PrefixCachedPolicy>(env_, prefix_cache_.get(), params.tenant,
                                                        params.max_tokens + fork_rows);
  }
  KVMEM_ASSIGN_OR_RETURN(r.prompt.tier, Acquire(key, *slot, &r.prompt.load_seconds, fork_rows));
  std::string composed;  // a server-side conversation's prompt
  const bool server_turn =
      key != nullptr && slot->spec.server_conversation && params.continue_conversation;
  if (server_turn) {
    const MemoryPolicy& held = *slot->policy;
    KVMEM_ASSIGN_OR_RETURN(composed, params.continue_conversation(
                                         held.client_conversation().value_or(held.text())));
    prompt_text = composed;
  }
  std::string retire;  // a checkpoint the turn continues whole
  if (key != nullptr) {
    KVMEM_ASSIGN_OR_RETURN(r.prompt.divergence, Reconcile(*key, *slot, prompt_text,
                                                          params.on_diverge, &r.prompt, &retire));
  }
  const Divergence& diverged = r.prompt.divergence;
  DivergedTurn undo(store_, key, slot.get(), diverged);
  MemoryPolicy& policy = *slot->policy;
  KVMEM_ASSIGN_OR_RETURN(TurnPlan plan, policy.Plan({prompt_text, params.focus}));
  r.prompt.match = plan.match;
  const auto t0 = Clock::now();
  std::vector<float> logits;
  Result<PromptAccount> account = policy.Apply(plan, &logits);
  if (!account.ok()) {
    policy.Abort();
    return account.status();
  }
  r.prompt.prompt_tokens = account->prompt_tokens;
  r.prompt.cached_tokens = account->cached_tokens;
  r.prompt.prefill_seconds = SecondsSince(t0);
  if (callbacks.on_prompt) callbacks.on_prompt(r.prompt);
  Status decoded = DecodeChoices(policy, std::move(logits), params, callbacks, &r);
  if (!decoded.ok()) {
    policy.Abort();
    return decoded;
  }
  if (r.end == TurnEnd::kCancelled) {
    // Nobody took the reply (the client left, the server is stopping): the turn is not
    // remembered, prompt nor partial reply, so the memory stays what the client's retry or
    // next turn continues. Nothing changed to save.
    policy.Abort();
    r.kv_tokens = policy.n_rows();
    slot->hot_bytes = static_cast<int64_t>(policy.bytes_in_use());
    slot->n_tokens = r.kv_tokens;
    return r;
  }
  if (server_turn && r.choices[0].unfed_token >= 0) {
    // A server-side conversation holds the whole reply: the next turn continues the rows, and
    // no client resends the last token.
    std::vector<float> ignored;
    Status fed = policy.Step(r.choices[0].unfed_token, &ignored);
    if (!fed.ok()) {
      policy.Abort();
      return fed;
    }
  }
  undo.Keep();
  KVMEM_RETURN_IF_ERROR(policy.Commit());
  r.kv_tokens = policy.n_rows();
  r.memory_report = policy.Report();
  {
    TurnRecord record{.at_unix_ms = NowUnixMs(),
                      .prompt_tokens = r.prompt.prompt_tokens,
                      .cached_tokens = r.prompt.cached_tokens,
                      .tier = r.prompt.tier,
                      .load_ms = r.prompt.load_seconds * 1e3,
                      .report = r.memory_report,
                      .detail = BoundedDetail(policy.Detail())};
    std::lock_guard<std::mutex> l(slot->mu);
    slot->last_turn = r.memory_report;
    record.turn = ++slot->turns_run;
    slot->recent_turns.push_back(std::move(record));
    if (slot->recent_turns.size() > kRecentTurns) slot->recent_turns.pop_front();
  }
  slot->hot_bytes = static_cast<int64_t>(policy.bytes_in_use());
  slot->n_tokens = r.kv_tokens;
  slot->last_use_ms = NowUnixMs();
  if (key != nullptr) KVMEM_RETURN_IF_ERROR(SaveSlot(*key, *slot, &r.save_seconds));
  if (!retire.empty()) {
    Status st = store_->DeleteCheckpoint(*key, retire);
    if (!st.ok()) KVMEM_LOG_WARN("%s", st.ToString().c_str());
  }
  if (!diverged.checkpoint.empty()) {  // the budget, once the turn is durable
    Result<int> trimmed = store_->TrimCheckpoints(*key, slot->spec.max_checkpoints,
                                                  retire.empty() ? diverged.restored : "");
    if (!trimmed.ok()) KVMEM_LOG_WARN("%s", trimmed.status().ToString().c_str());
  }
  if (key != nullptr) EnforceBudget(slot.get());
  return r;
}

Result<Divergence> AgentRuntime::Reconcile(const store::AgentKey& key, Slot& slot,
                                           std::string_view prompt, OnDiverge on_diverge,
                                           PromptStats* stats, std::string* retire) {
  Divergence d;
  const std::optional<std::string_view> held = slot.policy->client_conversation();
  if (!held || held->empty()) return d;
  const store::TextMatch m = store::MatchText(*held, prompt);
  if (m.kind != store::PrefixMatchKind::kDiverge) return d;
  const std::string name = "agent '" + key.id + "'";
  d.diverged = true;
  d.action = on_diverge;
  d.held_tokens = slot.policy->n_rows();
  if (on_diverge == OnDiverge::kReject) {
    return FailedPrecondition(
        "the request's conversation differs from the one " + name + " holds after " +
        std::to_string(m.matched_chars) + " of its " + std::to_string(m.stored_chars) +
        " characters, and on_diverge is \"reject\" (\"fork\" keeps it as a checkpoint, "
        "\"replace\" drops it)");
  }
  const int keep = slot.spec.max_checkpoints;
  if (store_ == nullptr || keep == 0) {
    d.action = OnDiverge::kReplace;  // nothing can hold it
    return d;
  }
  // A checkpoint that shares more of the prompt than the held conversation does.
  KVMEM_ASSIGN_OR_RETURN(std::vector<store::CheckpointInfo> checkpoints,
                         store_->ListCheckpoints(key, /*with_text=*/true));
  const store::CheckpointInfo* best = nullptr;
  store::TextMatch best_match = m;
  for (const store::CheckpointInfo& c : checkpoints) {
    const store::TextMatch cm = store::MatchText(c.text, prompt);
    if (cm.matched_bytes > best_match.matched_bytes) {
      best = &c;
      best_match = cm;
    }
  }
  if (on_diverge == OnDiverge::kFork) {
    KVMEM_ASSIGN_OR_RETURN(store::CheckpointInfo kept, store_->Checkpoint(key));
    d.checkpoint = kept.id;
  }
  if (best != nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    Status loaded = LoadMemory(key, slot, slot.spec, best->id);
    if (loaded.ok()) {
      d.restored = best->id;
      stats->tier = Tier::kWarm;
      stats->load_seconds += SecondsSince(t0);
      if (best_match.kind != store::PrefixMatchKind::kDiverge) *retire = best->id;
    } else {
      KVMEM_LOG_WARN("%s: checkpoint %s not used: %s", name.c_str(), best->id.c_str(),
                     loaded.ToString().c_str());
    }
  }
  return d;
}

Status AgentRuntime::ScorePrompt(std::string_view prompt_text, int top_n, PromptStats* stats) {
  const std::vector<int32_t> ids =
      tok_.Encode(prompt_text, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) return InvalidArgument("empty prompt");
  if (static_cast<int64_t>(ids.size()) > n_ctx_) {
    return OutOfRange("prompt of " + std::to_string(ids.size()) +
                      " tokens does not fit the context of " + std::to_string(n_ctx_));
  }
  const int block = options_.block_rows;
  kv::KvPool pool(model_.kv_geometry(block),
                  static_cast<int>((static_cast<int64_t>(ids.size()) + block - 1) / block),
                  options_.formats, chunks_.get());
  kv::KvSequence seq(&pool);
  std::vector<engine::TokenLogprob> scored;
  KVMEM_RETURN_IF_ERROR(engine::ScoreTokens(model_, threads_, &seq, ids, top_n, options_.max_batch,
                                            &batcher_.mutex(), &scored));
  const bool bos = tok_.add_bos() && ids.front() == tok_.bos_id();
  stats->logprobs.clear();
  if (!bos) {
    stats->logprobs.push_back({ids.front(), std::numeric_limits<float>::quiet_NaN(), {}});
  }
  stats->logprobs.insert(stats->logprobs.end(), scored.begin(), scored.end());
  stats->prompt_tokens = static_cast<int64_t>(ids.size());
  return Status::Ok();
}

Status AgentRuntime::DecodeChoices(MemoryPolicy& policy, std::vector<float> logits,
                                   const TurnParams& params, const TurnCallbacks& callbacks,
                                   TurnResult* r) {
  const auto t0 = Clock::now();
  const std::span<const int32_t> context = policy.context_tokens();
  r->choices.assign(params.n, ChoiceEnd{});
  if (params.n == 1) {
    PolicyRows rows(&policy);
    KVMEM_RETURN_IF_ERROR(
        DecodeChoice(tok_, rows, context, std::move(logits), params, 0, callbacks, &r->choices[0]));
  } else {
    // The policy's rows stay as the prompt left them while each choice decodes on its fork.
    const kv::KvSequence& prompt = *policy.Persist().rows;
    for (int i = 0; i < params.n; ++i) {
      ForkRows rows(env_, prompt);
      KVMEM_RETURN_IF_ERROR(
          DecodeChoice(tok_, rows, context, logits, params, i, callbacks, &r->choices[i]));
      if (r->choices[i].end == TurnEnd::kCancelled) {
        r->choices.resize(i + 1);
        break;
      }
    }
  }
  for (const ChoiceEnd& c : r->choices) r->completion_tokens += c.completion_tokens;
  r->end = r->choices[0].end;
  r->stop_sequence = r->choices[0].stop_sequence;
  if (r->choices.back().end == TurnEnd::kCancelled) r->end = TurnEnd::kCancelled;
  r->decode_seconds = SecondsSince(t0);
  return Status::Ok();
}

Status AgentRuntime::SaveSlot(const store::AgentKey& key, Slot& slot, double* seconds) {
  if (store_ == nullptr) return Status::Ok();
  const auto t0 = Clock::now();
  const PersistedMemory p = slot.policy->Persist();
  if (p.rows == nullptr) return Internal("the agent's memory could not be persisted");
  auto saved =
      store_->Save(key, *p.rows, p.tokens, p.text, p.token_ends, RecordOf(slot.spec, p.state));
  *seconds = SecondsSince(t0);
  if (!saved.ok()) return saved.status();
  slot.store_version = saved->version;
  return Status::Ok();
}

Result<std::optional<store::AgentLease>> AgentRuntime::HoldShared(const store::AgentKey& key,
                                                                  Slot& slot) {
  if (store_ == nullptr || !store_->shared()) return std::optional<store::AgentLease>();
  KVMEM_ASSIGN_OR_RETURN(store::AgentLease lease, store_->Lease(key));
  KVMEM_ASSIGN_OR_RETURN(const int64_t version, store_->Version(key));
  if (slot.policy != nullptr && version != slot.store_version) {
    KVMEM_LOG_INFO("agent %s: written by another server since it was loaded here; reloading",
                   SlotName(key).c_str());
    slot.LockedDrop();
    std::lock_guard<std::mutex> l(slot.mu);
    slot.has_spec = false;  // read again with the memory
  }
  return std::optional<store::AgentLease>(std::move(lease));
}

void AgentRuntime::EnforceBudget(const Slot* keep) {
  std::lock_guard<std::mutex> l(registry_mu_);
  int64_t total = 0;
  std::vector<Slot*> lru;
  for (auto& [name, s] : slots_) {
    total += s->hot_bytes;
    if (s.get() != keep && s->resident) lru.push_back(s.get());
  }
  std::sort(lru.begin(), lru.end(),
            [](const Slot* a, const Slot* b) { return a->last_use_ms < b->last_use_ms; });
  for (Slot* s : lru) {
    if (total <= static_cast<int64_t>(options_.hot_budget_bytes)) break;
    std::lock_guard<std::mutex> sl(s->mu);
    if (s->next_ticket != s->serving) continue;  // a turn runs or waits: not idle
    total -= s->hot_bytes;
    s->Drop();  // warm now: the store holds it (or, without a store, it starts over)
  }
}

Status AgentRuntime::CreateAgent(const store::AgentKey& key, const MemorySpec& memory) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  KVMEM_ASSIGN_OR_RETURN(const std::optional<store::AgentLease> lease, HoldShared(key, *slot));
  if ((slot->resident && (slot->n_tokens > 0 || slot->created)) ||
      (store_ != nullptr && store_->Contains(key))) {
    return FailedPrecondition("agent '" + key.id + "' already exists");
  }
  slot->LockedDrop();  // resident but empty (a new agent's ConversationText)
  {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->spec = memory;
    slot->has_spec = true;
    slot->created = true;
  }
  double seconds = 0;
  Status st = Acquire(&key, *slot, &seconds).status();
  slot->last_use_ms = NowUnixMs();
  if (st.ok()) st = SaveSlot(key, *slot, &seconds);
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(registry_mu_);
    slots_.erase(SlotName(key));
    return st;
  }
  slot->hot_bytes = static_cast<int64_t>(slot->policy->bytes_in_use());
  EnforceBudget(slot.get());
  return Status::Ok();
}

Result<std::string> AgentRuntime::ConversationText(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  KVMEM_ASSIGN_OR_RETURN(const std::optional<store::AgentLease> lease, HoldShared(key, *slot));
  double load_seconds = 0;
  KVMEM_ASSIGN_OR_RETURN(slot->arrival, Acquire(&key, *slot, &load_seconds));
  if (slot->arrival == Tier::kMiss) slot->arrival = Tier::kHot;  // nothing cached yet
  return std::string(slot->policy->text());
}

Result<Tier> AgentRuntime::AcquireExisting(const store::AgentKey& key, Slot& slot) {
  const bool exists =
      slot.policy != nullptr || slot.created || (store_ != nullptr && store_->Contains(key));
  if (!exists) return NotFound("no agent '" + key.id + "'");
  double load_seconds = 0;
  return Acquire(&key, slot, &load_seconds);
}

Result<AgentMemoryView> AgentRuntime::Inspect(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  KVMEM_ASSIGN_OR_RETURN(const std::optional<store::AgentLease> lease, HoldShared(key, *slot));
  KVMEM_ASSIGN_OR_RETURN(slot->arrival, AcquireExisting(key, *slot));
  if (slot->arrival == Tier::kMiss) slot->arrival = Tier::kHot;  // nothing cached yet
  const MemoryPolicy& policy = *slot->policy;
  AgentMemoryView v;
  v.policy = slot->spec.kind ? slot->spec.kind->name : "full";
  v.text = std::string(policy.text());
  v.rows = policy.n_rows();
  v.memory = policy.Inspect();
  if (v.memory.is_object() && v.memory.contains("text") && v.memory["text"].is_string()) {
    v.text = v.memory["text"].get<std::string>();  // a memory that is not a conversation
    v.memory.erase("text");
  }
  EnforceBudget(slot.get());
  return v;
}

Result<std::vector<TurnRecord>> AgentRuntime::RecentTurns(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> l(registry_mu_);
    auto it = slots_.find(SlotName(key));
    if (it != slots_.end()) slot = it->second;
  }
  if (slot) {
    std::lock_guard<std::mutex> l(slot->mu);
    if (!slot->recent_turns.empty() || slot->n_tokens > 0 || slot->created) {
      return std::vector<TurnRecord>(slot->recent_turns.begin(), slot->recent_turns.end());
    }
  }
  if (store_ == nullptr || !store_->Contains(key)) return NotFound("no agent '" + key.id + "'");
  return std::vector<TurnRecord>{};
}

Result<std::vector<AgentStatus>> AgentRuntime::List(const std::string& tenant) {
  std::map<std::string, AgentStatus> by_id;
  if (store_ != nullptr) {
    KVMEM_ASSIGN_OR_RETURN(std::vector<store::AgentInfo> stored, store_->List());
    for (const store::AgentInfo& a : stored) {
      if (!a.status.ok() || a.key.tenant != tenant) continue;
      AgentStatus s;
      s.key = a.key;
      s.tokens = a.n_tokens;
      s.bytes = static_cast<int64_t>(a.bytes_on_disk);
      s.tier = Tier::kWarm;
      s.formats = a.formats;
      s.last_use_unix_ms = a.last_use_unix_ms;
      const Result<MemorySpec> spec = SpecFromRecord(env_, a.memory);
      s.policy = spec.ok() ? spec->kind->name : a.memory.policy;
      s.config = spec.ok() ? spec->config : a.memory.config;
      s.server_conversation = a.memory.server_conversation;
      s.max_checkpoints = a.memory.max_checkpoints;
      by_id[a.key.id] = s;
    }
  }
  std::lock_guard<std::mutex> l(registry_mu_);
  for (auto& [name, slot] : slots_) {
    if (slot->key.tenant != tenant || !slot->resident) continue;
    // An agent exists once its memory holds a turn, from its creation, or while it is stored.
    std::lock_guard<std::mutex> sl(slot->mu);
    if (slot->n_tokens == 0 && !slot->created && !by_id.contains(slot->key.id)) continue;
    // Shared with other servers, the store says which agents exist: one deleted elsewhere is
    // gone, whatever this server still holds (its next turn finds it changed).
    if (store_ != nullptr && store_->shared() && !by_id.contains(slot->key.id)) continue;
    AgentStatus& s = by_id[slot->key.id];
    s.key = slot->key;
    s.tokens = slot->n_tokens;
    s.bytes = slot->hot_bytes;
    s.tier = Tier::kHot;
    s.formats = options_.formats;
    s.last_use_unix_ms = slot->last_use_ms;
    s.policy = slot->spec.kind ? slot->spec.kind->name : "full";
    s.config = slot->spec.config;
    s.server_conversation = slot->spec.server_conversation;
    s.max_checkpoints = slot->spec.max_checkpoints;
    s.last_turn = slot->last_turn;
  }
  std::vector<AgentStatus> out;
  for (auto& [id, s] : by_id) out.push_back(std::move(s));
  return out;
}

Result<AgentStatus> AgentRuntime::Get(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  KVMEM_ASSIGN_OR_RETURN(std::vector<AgentStatus> all, List(key.tenant));
  for (AgentStatus& s : all) {
    if (s.key.id != key.id) continue;
    if (store_ != nullptr) {
      KVMEM_ASSIGN_OR_RETURN(s.checkpoints, store_->ListCheckpoints(key, /*with_text=*/false));
    }
    return std::move(s);
  }
  return NotFound("no agent '" + key.id + "'");
}

Result<Json> AgentRuntime::Rebuild(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  KVMEM_ASSIGN_OR_RETURN(const std::optional<store::AgentLease> lease, HoldShared(key, *slot));
  KVMEM_RETURN_IF_ERROR(AcquireExisting(key, *slot).status());
  MemoryPolicy& policy = *slot->policy;
  KVMEM_ASSIGN_OR_RETURN(Json done, policy.Rebuild());
  slot->hot_bytes = static_cast<int64_t>(policy.bytes_in_use());
  slot->n_tokens = policy.n_rows();
  double save_seconds = 0;
  if (!done.is_null()) KVMEM_RETURN_IF_ERROR(SaveSlot(key, *slot, &save_seconds));
  EnforceBudget(slot.get());
  return done;
}

Result<Json> AgentRuntime::Segments(const store::AgentKey& key, const SegmentRequest& request) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  KVMEM_RETURN_IF_ERROR(ValidateSegmentRequest(request));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  KVMEM_ASSIGN_OR_RETURN(const std::optional<store::AgentLease> lease, HoldShared(key, *slot));
  KVMEM_RETURN_IF_ERROR(AcquireExisting(key, *slot).status());
  if (!slot->spec.kind->segments) {
    return Unsupported("agent '" + key.id + "' has the '" + slot->spec.kind->name +
                       "' memory policy; segments need the " + SegmentPolicyNames() + " policy");
  }
  MemoryPolicy& policy = *slot->policy;
  KVMEM_ASSIGN_OR_RETURN(Json out, policy.Segments(request));
  if (!request.writes()) return out;
  slot->hot_bytes = static_cast<int64_t>(policy.bytes_in_use());
  slot->n_tokens = policy.n_rows();
  slot->last_use_ms = NowUnixMs();
  double save_seconds = 0;
  if (Status saved = SaveSlot(key, *slot, &save_seconds); !saved.ok()) {
    // RAM holds a write the store does not: the next call reloads the memory as it was.
    slot->LockedDrop();
    return saved;
  }
  EnforceBudget(slot.get());
  return out;
}

Status AgentRuntime::Delete(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> l(registry_mu_);
    auto it = slots_.find(SlotName(key));
    if (it != slots_.end()) slot = it->second;
  }
  bool found = false;
  if (slot) {
    Turn turn(*slot);  // after the turns already queued
    found = slot->resident && (slot->n_tokens > 0 || slot->created);
    slot->LockedDrop();
    slot->n_tokens = 0;
    std::lock_guard<std::mutex> l(registry_mu_);
    slots_.erase(SlotName(key));
  }
  if (store_ != nullptr && store_->Contains(key)) {
    KVMEM_RETURN_IF_ERROR(store_->Delete(key));
    found = true;
  }
  return found ? Status::Ok() : NotFound("no agent '" + key.id + "'");
}

RuntimeStats AgentRuntime::stats() {
  RuntimeStats s;
  s.steps = batcher_.stats();
  if (prefix_cache_ != nullptr) s.prefix_cache = prefix_cache_->stats();
  {
    std::lock_guard<std::mutex> l(registry_mu_);
    for (auto& [name, slot] : slots_) {
      s.hot_bytes += slot->hot_bytes;
      s.agents_hot += slot->resident && slot->n_tokens > 0 ? 1 : 0;
    }
  }
  if (store_ != nullptr) {
    auto all = store_->List();
    if (all.ok()) {
      for (const store::AgentInfo& a : *all) {
        ++s.agents_stored;
        s.store_bytes += static_cast<int64_t>(a.bytes_on_disk);
      }
    }
  }
  return s;
}

}  // namespace kvmem::memory
