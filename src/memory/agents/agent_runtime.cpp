#include "memory/agents/agent_runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>

#include "core/log.h"
#include "engine/forward.h"
#include "engine/stop_strings.h"
#include "kv/kv_sequence.h"
#include "memory/agents/agent_slot.h"

namespace kvmem::memory {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SlotName(const store::AgentKey& key) { return key.tenant + "/" + key.id; }

}  // namespace

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kMiss: return "miss";
    case Tier::kHot: return "hot";
    case Tier::kWarm: return "warm";
  }
  return "?";
}

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
    : model_(model), tok_(tok), threads_(threads), store_(store), options_(options) {
  const int64_t train = model.spec().n_ctx_train;
  n_ctx_ = options_.n_ctx > 0 ? std::min<int64_t>(options_.n_ctx, train) : train;
  const kv::KvPool probe(model.kv_geometry(options_.block_rows), 0, options_.formats);
  chunks_ = std::make_unique<kv::LayerChunks>(probe.layer_bytes(), options_.hot_budget_bytes);
}

AgentRuntime::~AgentRuntime() = default;

Status AgentRuntime::Warmup() {
  chunks_->Reserve(options_.prefault_bytes);
  kv::KvPool pool(model_.kv_geometry(options_.block_rows), 1, options_.formats, chunks_.get());
  kv::KvSequence seq(&pool);
  const int32_t one[] = {tok_.bos_id() >= 0 ? tok_.bos_id() : 0};
  std::vector<float> logits;
  std::lock_guard<std::mutex> l(compute_mu_);
  return engine::Forward(model_, threads_, &seq, one, 0, false, &logits);
}

std::string_view AgentRuntime::Piece(int32_t id) const {
  // A BOS the tokenizer adds is not spelled in the rendered text.
  if (id == tok_.bos_id() && tok_.add_bos()) return {};
  return tok_.TokenToPiece(id, /*render_special=*/true);
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

Result<Tier> AgentRuntime::Acquire(const store::AgentKey* key, Slot& slot, double* load_seconds) {
  if (slot.pool) {
    const Tier t = slot.tokens.empty() ? Tier::kMiss : slot.arrival;
    slot.arrival = Tier::kHot;
    return t;
  }
  const bool stored = key != nullptr && store_ != nullptr && store_->Contains(*key);
  if (stored) {
    // A manifest that cannot be read is handled with the cache below (as a full agent's).
    Result<store::MemoryPolicy> policy = store_->ReadMemoryPolicy(*key);
    if (policy.ok()) {
      Result<AgentMemory> memory = FromPolicy(*policy);
      if (!memory.ok()) return memory.status().WithContext("agent " + SlotName(*key));
      std::lock_guard<std::mutex> l(slot.mu);  // List reads it
      slot.memory = *memory;
    }
  }
  const bool retrieval = slot.memory.mode == MemoryMode::kRetrieval;
  const int block = options_.block_rows;
  // Retrieval: the history and one context of working rows, each with a partial block.
  const int64_t rows = retrieval ? options_.max_history_tokens + n_ctx_ + 2 * block : n_ctx_;
  slot.pool = std::make_unique<kv::KvPool>(model_.kv_geometry(block),
                                           static_cast<int>((rows + block - 1) / block),
                                           options_.formats, chunks_.get());
  slot.seq = std::make_unique<kv::KvSequence>(slot.pool.get());
  slot.tokens.clear();
  slot.text.clear();
  slot.token_ends.clear();
  slot.resident = true;
  slot.arrival = Tier::kHot;  // what the turns after this one find
  Tier tier = Tier::kMiss;
  if (stored) {
    const auto t0 = Clock::now();
    store::AgentRecord rec;
    Status st = store_->Load(*key, slot.seq.get(), &rec);
    *load_seconds = Since(t0);
    if (st.ok()) {
      slot.tokens = std::move(rec.tokens);
      slot.text = std::move(rec.text);
      tier = Tier::kWarm;
    } else if (retrieval) {
      // A retrieval agent's history is not in its prompts: keep the files for a person to see.
      slot.LockedDrop();
      return st.WithContext("agent " + SlotName(*key) + ": stored memory not usable");
    } else {
      // A cache this model cannot use (corrupt, another format or model) is removed and
      // replaced at the end of this turn; the conversation itself is in the prompt, so nothing
      // is lost. (Removing it matters: Save reuses block files by their content name, so a
      // damaged file left in place would be named again.)
      KVMEM_LOG_WARN("agent %s: stored cache not used: %s", SlotName(*key).c_str(),
                     st.ToString().c_str());
      Status removed = store_->Delete(*key);
      if (!removed.ok()) {
        KVMEM_LOG_WARN("agent %s: removing the unusable cache: %s", SlotName(*key).c_str(),
                       removed.ToString().c_str());
      }
    }
  }
  if (retrieval) {
    Status st = AdoptHistory(slot);
    if (!st.ok()) {
      slot.LockedDrop();
      return st.WithContext("agent " + (key ? SlotName(*key) : std::string("(anonymous)")));
    }
  }
  return tier;
}

Result<std::vector<int32_t>> AgentRuntime::PlanPrompt(Slot& slot, std::string_view text,
                                                      PromptStats* ps) {
  const store::TextMatch m = store::MatchText(slot.text, text);
  ps->match = m.kind;
  auto piece = [this](int32_t id) { return Piece(id); };
  int64_t keep = store::TokensWithinText(slot.tokens, text, m.matched_bytes, piece);
  if (m.kind == store::PrefixMatchKind::kDiverge && m.ratio < options_.min_diverge_ratio) keep = 0;
  size_t offset = 0;
  for (int64_t i = 0; i < keep; ++i) offset += Piece(slot.tokens[i]).size();
  std::vector<int32_t> ids;
  if (keep > 0 && offset == text.size()) {
    // Everything is cached: recompute the last token, whose logits start the reply.
    --keep;
    offset -= Piece(slot.tokens[keep]).size();
    ids.push_back(slot.tokens[keep]);
  }
  // Sliding-window layers may have released rows the first new token would read.
  const model::ModelSpec& spec = model_.spec();
  for (int l = 0; l < spec.n_layers && keep > 0; ++l) {
    const int64_t released = slot.seq->released_through(l);
    const int w = spec.layers[l].sliding_window;
    if (w > 0 && released != kv::kNoPosition && keep - w < released) keep = 0;
  }
  if (keep == 0) {
    offset = 0;
    ids = tok_.Encode(text, /*add_special=*/true, /*parse_special=*/true);
  } else if (ids.empty()) {
    ids = tok_.Encode(text.substr(offset), /*add_special=*/false, /*parse_special=*/true);
  }
  if (ids.empty()) return InvalidArgument("the prompt is empty");
  const int64_t total = keep + static_cast<int64_t>(ids.size());
  if (total >= n_ctx_) {
    return OutOfRange("the prompt has " + std::to_string(total) + " tokens; the context holds " +
                      std::to_string(n_ctx_) + " (with room for at least one generated token)");
  }
  if (keep == 0) {
    slot.seq = std::make_unique<kv::KvSequence>(slot.pool.get());  // frees the old rows
  } else {
    slot.seq->Truncate(keep);
  }
  slot.tokens.resize(keep);
  slot.text.resize(offset);
  ps->cached_tokens = keep;
  ps->prompt_tokens = total;
  return ids;
}

Status AgentRuntime::Prefill(Slot& slot, std::span<const int32_t> ids,
                             std::vector<float>* logits) {
  const size_t batch = static_cast<size_t>(options_.max_batch);
  for (size_t begin = 0; begin < ids.size(); begin += batch) {
    const auto part = ids.subspan(begin, std::min(batch, ids.size() - begin));
    Status st;
    {
      std::lock_guard<std::mutex> l(compute_mu_);
      st = engine::Forward(model_, threads_, slot.seq.get(), part, slot.seq->n_rows(), false,
                           logits, options_.max_batch);
    }
    if (!st.ok()) {
      slot.seq->Truncate(static_cast<int64_t>(slot.tokens.size()));
      return st;
    }
    slot.tokens.insert(slot.tokens.end(), part.begin(), part.end());
    for (int32_t id : part) slot.text.append(Piece(id));
  }
  return Status::Ok();
}

Result<TurnResult> AgentRuntime::RunTurn(const store::AgentKey* key, std::string_view prompt_text,
                                         const TurnParams& params,
                                         const TurnCallbacks& callbacks) {
  if (key != nullptr) KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(*key));
  if (params.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  std::shared_ptr<Slot> slot = key ? GetSlot(*key) : std::make_shared<Slot>();
  Turn turn(*slot);
  TurnResult r;
  KVMEM_ASSIGN_OR_RETURN(r.prompt.tier, Acquire(key, *slot, &r.prompt.load_seconds));
  if (slot->memart) {
    KVMEM_ASSIGN_OR_RETURN(r, RunRetrievalTurn(*slot, prompt_text, params, callbacks, r));
  } else {
    KVMEM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PlanPrompt(*slot, prompt_text, &r.prompt));
    auto t0 = Clock::now();
    std::vector<float> logits;
    KVMEM_RETURN_IF_ERROR(Prefill(*slot, ids, &logits));
    // The prompt text is the client's, byte for byte (the pieces spell it; this also covers a
    // BOS-less suffix whose pieces were checked only up to the match).
    slot->text.assign(prompt_text);
    r.prompt.prefill_seconds = Since(t0);
    if (callbacks.on_prompt) callbacks.on_prompt(r.prompt);
    kv::KvSequence* seq = slot->seq.get();
    KVMEM_RETURN_IF_ERROR(DecodeReply(
        seq, [seq] { return seq->n_rows(); }, &logits, slot->tokens, params, callbacks, &r,
        [&](int32_t t) {
          slot->tokens.push_back(t);
          slot->text.append(Piece(t));
        }));
    r.kv_tokens = slot->seq->n_rows();
  }
  slot->hot_bytes = static_cast<int64_t>(slot->pool->bytes_in_use());
  slot->n_tokens = r.kv_tokens;
  slot->last_use_ms = NowUnixMs();
  if (key != nullptr) KVMEM_RETURN_IF_ERROR(SaveSlot(*key, *slot, &r.save_seconds));
  if (key != nullptr) EnforceBudget(slot.get());
  return r;
}

Status AgentRuntime::DecodeReply(kv::KvSequence* seq, const std::function<int64_t()>& next_position,
                                 std::vector<float>* logits, std::vector<int32_t> history,
                                 const TurnParams& params, const TurnCallbacks& callbacks,
                                 TurnResult* r, const std::function<void(int32_t)>& kept) {
  const auto t0 = Clock::now();
  engine::Sampler sampler(params.sampler);
  engine::StopMatcher stops(params.stop);
  tokenizer::StreamingDecoder decoder(&tok_);
  r->end = TurnEnd::kLength;
  bool cancelled = false;
  for (int i = 0; i < params.max_tokens; ++i) {
    const int32_t t = sampler.Sample(*logits, history);
    ++r->completion_tokens;
    if (tok_.IsEndOfGeneration(t)) {
      r->end = TurnEnd::kEndOfTurn;
      break;
    }
    history.push_back(t);
    auto piece = decoder.Push(t);
    if (!piece.ok()) return piece.status();
    const std::string out = stops.Push(*piece);
    if (!out.empty() && callbacks.on_text && !callbacks.on_text(out)) {
      cancelled = true;
      r->end = TurnEnd::kCancelled;
      break;
    }
    if (stops.stopped()) {
      r->end = TurnEnd::kStopSequence;
      r->stop_sequence = stops.matched();
      break;
    }
    if (i + 1 == params.max_tokens || seq->n_rows() + 1 >= n_ctx_) break;
    const int32_t one[] = {t};
    Status st;
    {
      std::lock_guard<std::mutex> l(compute_mu_);
      st = engine::Forward(model_, threads_, seq, one, next_position(), false, logits);
    }
    if (!st.ok()) return st;
    kept(t);
  }
  if (!cancelled && !stops.stopped() && callbacks.on_text) {
    const std::string rest = stops.Push(decoder.Flush()) + stops.Flush();
    if (!rest.empty()) callbacks.on_text(rest);
  }
  r->decode_seconds = Since(t0);
  return Status::Ok();
}

Status AgentRuntime::SaveSlot(const store::AgentKey& key, const Slot& slot, double* seconds) {
  if (store_ == nullptr) return Status::Ok();
  const auto t0 = Clock::now();
  const kv::KvSequence& rows = slot.memart ? slot.memart->history() : *slot.seq;
  auto saved = store_->Save(key, rows, slot.tokens, slot.text, slot.token_ends,
                            ToPolicy(slot.memory));
  *seconds = Since(t0);
  return saved.status();
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

Status AgentRuntime::CreateAgent(const store::AgentKey& key, const AgentMemory& memory) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  KVMEM_RETURN_IF_ERROR(ValidateAgentMemory(memory));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  if ((slot->resident && (slot->n_tokens > 0 || slot->memart)) ||
      (store_ != nullptr && store_->Contains(key))) {
    return FailedPrecondition("agent '" + key.id + "' already exists");
  }
  slot->LockedDrop();  // resident but empty (a new agent's ConversationText)
  {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->memory = memory;
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
  slot->hot_bytes = static_cast<int64_t>(slot->pool->bytes_in_use());
  EnforceBudget(slot.get());
  return Status::Ok();
}

Result<std::string> AgentRuntime::ConversationText(const store::AgentKey& key) {
  KVMEM_RETURN_IF_ERROR(store::ValidateAgentKey(key));
  std::shared_ptr<Slot> slot = GetSlot(key);
  Turn turn(*slot);
  double load_seconds = 0;
  KVMEM_ASSIGN_OR_RETURN(slot->arrival, Acquire(&key, *slot, &load_seconds));
  if (slot->arrival == Tier::kMiss) slot->arrival = Tier::kHot;  // nothing cached yet
  return slot->text;
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
      const Result<MemoryMode> mode = ParseMemoryMode(a.memory_mode);
      s.mode = mode.ok() ? *mode : MemoryMode::kFull;
      by_id[a.key.id] = s;
    }
  }
  std::lock_guard<std::mutex> l(registry_mu_);
  for (auto& [name, slot] : slots_) {
    if (slot->key.tenant != tenant || !slot->resident) continue;
    // A full agent exists once its cache holds a turn; a retrieval one from its creation.
    std::lock_guard<std::mutex> sl(slot->mu);
    const bool retrieval = slot->memory.mode == MemoryMode::kRetrieval;
    if (slot->n_tokens == 0 && !retrieval && !slot->created) continue;
    AgentStatus& s = by_id[slot->key.id];
    s.key = slot->key;
    s.tokens = slot->n_tokens;
    s.bytes = slot->hot_bytes;
    s.tier = Tier::kHot;
    s.formats = options_.formats;
    s.last_use_unix_ms = slot->last_use_ms;
    s.mode = slot->memory.mode;
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
    if (s.key.id == key.id) return std::move(s);
  }
  return NotFound("no agent '" + key.id + "'");
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
    found = slot->resident && (slot->n_tokens > 0 || slot->memart);
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
