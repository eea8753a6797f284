#include "memory/segments/keep_policy.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "core/clock.h"
#include "core/log.h"
#include "tokenizer/chat_template.h"

namespace kvmem::memory {
namespace {

using Type = ConfigField::Type;
using segments::KeepConfig;
using segments::KeepMemory;
using segments::RecomputeRule;

constexpr char kMemoryHeader[] = "Memory:\n";
// Where the system message's content goes; never in a real prompt.
constexpr char kMarker[] = "\x1f{keep-segments}\x1f";
// A segment's tokens at most, as a share of the context: it must fit beside the prefix and a
// request.
constexpr int64_t kSegmentShare = 2;
// With top_k 0 every segment is read: they fill at most 3/4 of the context, the rest is the
// request's and the reply's.
constexpr int64_t kReadNumerator = 3, kReadDenominator = 4;
// The agents' blocks: 256 rows.
constexpr int64_t kBlockRows = 256;

std::vector<ConfigField> Fields() {
  return {
      {"top_k",
       Type::kInt,
       0,
       0,
       static_cast<double>(kMaxKeepSegments),
       {},
       0,
       "segments a request reads, the nearest to it by sentence embedding (static groups "
       "whole); 0 reads every segment"},
      {"recompute_ratio",
       Type::kNumber,
       0.15,
       0,
       1,
       {},
       0,
       "r: mean share of the read segments' tokens recomputed per layer"},
      {"static_after",
       Type::kInt,
       10,
       1,
       1 << 20,
       {},
       0,
       "t: turns without a change before a group of segments is cached as one (static)"},
      {"group_size",
       Type::kInt,
       8,
       1,
       static_cast<double>(kMaxKeepSegments),
       {},
       0,
       "mean segments per group (k-means over their embeddings); 1: no groups, every segment a "
       "cache of its own"},
      {"recompute",
       Type::kString,
       "multi_hop",
       0,
       0,
       {"multi_hop", "single_hop", "kv_deviation", "none"},
       0,
       "which tokens are recomputed: whole segments by multi-hop importance (KEEP), by the "
       "request's attention alone, tokens whose KV deviate most (CacheBlend), or none (full "
       "reuse)"},
  };
}

KeepConfig ConfigOf(const Json& c) {
  KeepConfig k;
  k.top_k = c.at("top_k").get<int>();
  k.recompute_ratio = c.at("recompute_ratio").get<double>();
  k.static_after = c.at("static_after").get<int>();
  k.group_size = c.at("group_size").get<int>();
  k.static_dynamic = k.group_size > 1;
  const std::string rule = c.at("recompute").get<std::string>();
  k.rule = rule == "single_hop"     ? RecomputeRule::kSingleHop
           : rule == "kv_deviation" ? RecomputeRule::kKvDeviation
           : rule == "none"         ? RecomputeRule::kNone
                                    : RecomputeRule::kMultiHop;
  return k;
}

// Retrieval and k-means groups embed text.
bool NeedsEncoder(const KeepConfig& c) { return c.top_k > 0 || c.static_dynamic; }

// The segments' tokens an agent may hold: the server's bound on a memory's history.
int64_t MaxSegmentTokens(const PolicyEnv& env) { return env.max_history_tokens; }

int64_t RowsNeeded(const PolicyEnv& env, const Json&) {
  // The packed caches (live rows, and dead ones up to as many again before a compaction), the
  // compaction's copy, Persist's copy, a new cache's own sequence, the prefix and a working
  // context.
  return 4 * MaxSegmentTokens(env) + env.n_ctx + 3 * kBlockRows;
}

// The system turn around the segments: the text before the marker and after it.
std::pair<std::string, std::string> TurnAround(const tokenizer::Tokenizer& tok) {
  const std::string content = std::string(kMemoryHeader) + kMarker;
  Result<tokenizer::ChatTemplate> tmpl =
      tokenizer::DetectChatTemplate(tok.chat_template(), tok.architecture());
  if (tmpl.ok()) {
    for (const char* role : {"system", "user"}) {  // Gemma renders no turn for a system alone
      const tokenizer::ChatMessage m{role, content};
      Result<std::string> r = tokenizer::RenderChat(*tmpl, {&m, 1}, false);
      if (!r.ok()) continue;
      const size_t at = r->find(kMarker);
      if (at == std::string::npos) continue;
      return {r->substr(0, at), r->substr(at + sizeof(kMarker) - 1)};
    }
  }
  return {kMemoryHeader, ""};  // no chat template: the memory as plain text before the prompt
}

std::optional<std::unique_lock<std::mutex>> LockCompute(const PolicyEnv& env) {
  if (env.compute == nullptr) return std::nullopt;
  return env.compute->Exclusive();
}

Json SegmentJson(const segments::SegmentInfo& s) {
  return Json{{"name", s.name},
              {"text", s.text},
              {"group", s.group},
              {"static", s.is_static},
              {"tokens", s.tokens}};
}

// The text of a prompt's last message before the one it opens for the reply (a request's
// question, by default what retrieval is scored with), special tokens left out.
std::string LastMessage(const PolicyEnv& env, std::span<const int32_t> tokens) {
  std::vector<size_t> opens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokenizer::OpensChatMessage(env.Piece(tokens[i]))) opens.push_back(i);
  }
  size_t begin = 0, end = tokens.size();
  if (opens.size() >= 2) {
    begin = opens[opens.size() - 2];
    end = opens.back();
  }
  Result<std::string> text = env.tok->Decode(tokens.subspan(begin, end - begin));
  return text.ok() ? *text : std::string();
}

}  // namespace

PolicyKind KeepPolicyKind() {
  PolicyKind k;
  k.name = "keep";
  k.description =
      "KEEP: named text segments a client writes (PUT /v1/agents/{id}/segments/{name}), each "
      "cached apart; every request reads them placed together, the attention between them "
      "repaired by recomputing the segments that multi-hop importance finds";
  k.fields = Fields();
  k.parse = [](const PolicyEnv&, const Json& config) {
    const std::vector<ConfigField> fields = Fields();
    return ReadConfig("keep", fields, config, DefaultConfig(fields));
  };
  k.presets = [](const PolicyEnv&) { return Json::object(); };
  k.rows_needed = RowsNeeded;
  k.rebuildable_from_prompt = false;  // the segments are in no prompt
  k.segments = true;
  SetFactory<KeepPolicy>(&k);
  return k;
}

Result<std::unique_ptr<KeepPolicy>> KeepPolicy::Make(const PolicyEnv& env, const Json& config,
                                                     kv::KvPool* pool, StoredMemory stored) {
  std::unique_ptr<KeepPolicy> p(new KeepPolicy(env, pool));
  const KeepConfig kc = ConfigOf(config);
  const Json& s = stored.state;
  const bool restoring = !s.empty();
  if (restoring && (!s.is_object() || s.value("version", Json()) != Json(1) ||
                    !s.contains("keep") || !s["keep"].is_object())) {
    return Corrupt("keep state: not a version-1 keep memory");
  }
  if (!restoring && stored.rows && stored.rows->n_rows() != 0) {
    return Corrupt("keep: stored rows without the policy's state");
  }
  if (NeedsEncoder(kc) && env.encoder == nullptr) {
    return FailedPrecondition(
        "keep: top_k > 0 and groups of segments (group_size > 1) embed text with a sentence "
        "encoder and this server has none (scripts/install_deps.sh --model minilm installs "
        "all-MiniLM-L6-v2; group_size 1 with top_k 0 needs none)");
  }
  std::tie(p->prefix_text_, p->suffix_text_) = TurnAround(*env.tok);
  const std::vector<int32_t> prefix = env.tok->Encode(p->prefix_text_, /*add_special=*/true, true);
  const auto lock = LockCompute(env);
  if (restoring) {
    KVMEM_ASSIGN_OR_RETURN(
        p->keep_, KeepMemory::Restore(*env.model, env.threads, pool, kc, std::move(stored.rows),
                                      stored.tokens, s["keep"]));
    const std::span<const int32_t> held = p->keep_->prefix();
    if (!std::equal(held.begin(), held.end(), prefix.begin(), prefix.end())) {
      // Another template or tokenizer: every cache is computed again after the new prefix.
      KVMEM_RETURN_IF_ERROR(p->keep_->SetPrefix(prefix));
      KVMEM_RETURN_IF_ERROR(p->keep_->Refresh());
    }
  } else {
    p->keep_ = std::make_unique<KeepMemory>(*env.model, env.threads, pool, kc);
    KVMEM_RETURN_IF_ERROR(p->keep_->SetPrefix(prefix));
  }
  return p;
}

bool KeepPolicy::needs_encoder() const { return NeedsEncoder(keep_->config()); }

std::vector<float> KeepPolicy::Embed(std::vector<std::string> texts) const {
  if (env_.encoder == nullptr) return {};
  const auto lock = LockCompute(env_);
  return env_.encoder->Embed(texts, env_.threads);
}

int64_t KeepPolicy::n_rows() const {
  return static_cast<int64_t>(keep_->prefix().size()) + keep_->segment_tokens();
}

std::string KeepPolicy::MemoryText(std::vector<size_t>* starts) const {
  std::string text = prefix_text_;
  for (const segments::SegmentInfo& s : keep_->List()) {
    if (starts != nullptr) starts->push_back(text.size());
    text += s.text + "\n";
  }
  return text;
}

Result<TurnPlan> KeepPolicy::Plan(const TurnInput& input) const {
  if (input.prompt_text.empty()) return InvalidArgument("the prompt is empty");
  TurnPlan plan;
  plan.match = store::PrefixMatchKind::kExact;
  plan.prompt_text = input.prompt_text;
  plan.kept_rows = static_cast<int64_t>(keep_->prefix().size());
  std::string query = suffix_text_;
  query += input.prompt_text;
  plan.prefill = env_.tok->Encode(query, /*add_special=*/false, /*parse_special=*/true);
  const auto n = static_cast<int64_t>(plan.prefill.size());
  if (n == 0) return InvalidArgument("the prompt is empty");
  plan.focus = {0, n};
  // With top_k 0 every segment is read: the context must hold them all; with top_k > 0 Apply
  // checks what retrieval chose.
  int64_t read = plan.kept_rows;
  if (keep_->config().top_k == 0) read += keep_->segment_tokens();
  if (read + n + 1 > env_.n_ctx) {
    return OutOfRange("the prompt has " + std::to_string(n) + " tokens and the memory's segments " +
                      std::to_string(read) + "; the context holds " + std::to_string(env_.n_ctx));
  }
  if (keep_->config().top_k > 0) {
    plan.detail["embed"] =
        input.focus.empty() ? LastMessage(env_, plan.prefill) : std::string(input.focus);
  }
  return plan;
}

Result<PromptAccount> KeepPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  snapshot_.reset();
  working_.reset();
  std::vector<float> query_embedding;
  if (plan.detail.contains("embed")) {
    query_embedding = Embed({plan.detail["embed"].get<std::string>()});
  }
  Result<segments::BlendResult> r = [&] {
    const auto lock = LockCompute(env_);
    return keep_->Answer(plan.prefill, query_embedding);
  }();
  if (!r.ok()) return r.status();
  if (r->next_pos + 1 > env_.n_ctx) {
    return OutOfRange("the segments read and the prompt take " + std::to_string(r->next_pos) +
                      " tokens; the context holds " + std::to_string(env_.n_ctx));
  }
  working_ = std::move(r->working);
  next_pos_ = r->next_pos;
  *logits = std::move(r->logits);
  context_ = plan.prefill;
  const segments::BlendStats& st = r->stats;
  const segments::EncodeCost encoded = keep_->TakeEncoded();
  report_ = Json{{"segments", static_cast<int64_t>(keep_->size())},
                 {"segments_read", keep_->last_read()},
                 {"segment_tokens", st.segment_tokens},
                 {"query_tokens", st.query_tokens},
                 {"recomputed_share", st.computed_share()},
                 {"hops", st.hops},
                 {"recomputed_last_layer", keep_->last_recomputed()},
                 {"encoded_tokens", encoded.tokens},
                 {"encoded_caches", encoded.units},
                 {"rule", segments::RecomputeRuleName(keep_->config().rule)},
                 {"step", keep_->step()}};
  const auto query = static_cast<int64_t>(plan.prefill.size());
  return PromptAccount{next_pos_, next_pos_ - query};
}

bool KeepPolicy::CanStep() const { return working_ != nullptr && next_pos_ + 1 < env_.n_ctx; }

Status KeepPolicy::Step(int32_t token, std::vector<float>* logits) {
  if (!working_) return FailedPrecondition("keep: no open turn");
  const int32_t one[] = {token};
  KVMEM_RETURN_IF_ERROR(env_.compute->Forward(working_.get(), one, next_pos_, false, logits));
  ++next_pos_;
  context_.push_back(token);
  return Status::Ok();
}

Status KeepPolicy::Commit() {
  if (!working_) return FailedPrecondition("keep: no open turn");
  snapshot_.reset();
  keep_->EndStep();
  working_.reset();
  context_.clear();
  // The new step's promotions to static run now, after the reply, not before the next request's
  // first token. A failure here is the next Answer's to report (it refreshes again).
  const auto t0 = std::chrono::steady_clock::now();
  Status refreshed;
  {
    const auto lock = LockCompute(env_);
    refreshed = keep_->Refresh();
  }
  if (!refreshed.ok()) {
    KVMEM_LOG_WARN("keep: refreshing the caches after a turn: %s", refreshed.ToString().c_str());
  }
  const segments::EncodeCost encoded = keep_->TakeEncoded();
  if (encoded.units > 0) {
    report_["maintenance"] = Json{{"action", "refresh"},
                                  {"seconds", SecondsSince(t0)},
                                  {"encoded_tokens", encoded.tokens},
                                  {"encoded_caches", encoded.units}};
  }
  return Status::Ok();
}

void KeepPolicy::Abort() {
  working_.reset();
  context_.clear();
}

Result<Json> KeepPolicy::Segments(const SegmentRequest& request) {
  KVMEM_RETURN_IF_ERROR(ValidateSegmentRequest(request));
  if (working_) return FailedPrecondition("keep: a turn is open");
  switch (request.op) {
    case SegmentRequest::Op::kList: {
      Json list = Json::array();
      for (const segments::SegmentInfo& s : keep_->List()) list.push_back(SegmentJson(s));
      return list;
    }
    case SegmentRequest::Op::kPut:
      return PutSegment(request.name, request.text);
    case SegmentRequest::Op::kDelete: {
      snapshot_.reset();
      {
        const auto lock = LockCompute(env_);
        KVMEM_RETURN_IF_ERROR(keep_->Remove(request.name));
      }
      return Json{{"deleted", true}, {"name", request.name}};
    }
  }
  return Internal("keep: unknown segment operation");
}

Result<Json> KeepPolicy::PutSegment(const std::string& name, const std::string& text) {
  const std::optional<segments::SegmentInfo> old = keep_->Find(name);
  if (!old && keep_->size() >= kMaxKeepSegments) {
    return ResourceExhausted("keep: an agent holds at most " + std::to_string(kMaxKeepSegments) +
                             " segments");
  }
  std::vector<int32_t> tokens = env_.tok->Encode(text + "\n", false, /*parse_special=*/false);
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t prefix = static_cast<int64_t>(keep_->prefix().size());
  if (prefix + n > env_.n_ctx / kSegmentShare) {
    return OutOfRange("segment '" + name + "' has " + std::to_string(n) +
                      " tokens; with the memory's prefix a segment takes at most half of the "
                      "context of " +
                      std::to_string(env_.n_ctx));
  }
  const int64_t held = n - (old ? old->tokens : 0) + keep_->segment_tokens();
  if (held > MaxSegmentTokens(env_)) {
    return ResourceExhausted("keep: the segments would hold " + std::to_string(held) +
                             " tokens; this server keeps at most " +
                             std::to_string(MaxSegmentTokens(env_)));
  }
  if (keep_->config().top_k == 0 &&
      prefix + held > env_.n_ctx * kReadNumerator / kReadDenominator) {
    return OutOfRange("keep: with top_k 0 every request reads every segment, and they would take " +
                      std::to_string(prefix + held) + " of the context's " +
                      std::to_string(env_.n_ctx) +
                      " tokens (at most 3/4; top_k > 0 reads the "
                      "nearest only)");
  }
  std::vector<float> embedding;
  if (needs_encoder()) embedding = Embed({text});
  snapshot_.reset();
  {
    const auto lock = LockCompute(env_);
    KVMEM_RETURN_IF_ERROR(keep_->Put(name, text, std::move(tokens), std::move(embedding)));
  }
  return SegmentJson(*keep_->Find(name));
}

PersistedMemory KeepPolicy::Persist() const {
  if (!snapshot_) {
    Result<KeepMemory::Persisted> p = keep_->Persist();
    if (!p.ok()) {
      KVMEM_LOG_ERROR("keep: the memory's rows could not be copied for the store: %s",
                      p.status().ToString().c_str());
      return PersistedMemory{};
    }
    snapshot_ = std::move(*p);
    snapshot_text_ = MemoryText(nullptr);
  }
  PersistedMemory out;
  out.rows = snapshot_->rows.get();
  out.tokens = snapshot_->tokens;
  out.text = snapshot_text_;
  out.state = Json{{"version", 1}, {"keep", snapshot_->state}};
  return out;
}

Json KeepPolicy::Inspect() const {
  std::vector<size_t> starts;
  std::string text = MemoryText(&starts);
  Json parts = Json::array();
  const std::vector<segments::SegmentInfo> list = keep_->List();
  for (size_t i = 0; i < list.size(); ++i) {
    const size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
    Json part = SegmentJson(list[i]);
    part.erase("text");
    part["kind"] = "segment";
    part["bytes"] = Json::array({starts[i], end});
    parts.push_back(std::move(part));
  }
  Json cached = Json::array();
  if (!text.empty()) cached = Json::array({0, text.size()});
  return Json{{"text", std::move(text)},
              {"cached", std::move(cached)},
              {"parts", std::move(parts)},
              {"note",
               "each segment's rows are computed after the prefix alone; a request reads them "
               "placed together and recomputes some (the turn's report says which)"}};
}

}  // namespace kvmem::memory
