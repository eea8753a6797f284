#include "memory/episodic/epicache_policy.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include "core/clock.h"
#include "core/log.h"
#include "engine/forward.h"
#include "memory/episodic/layer_budgets.h"
#include "tokenizer/chat_template.h"

namespace kvmem::memory {

struct EpiCachePolicy::Settings {
  int64_t budget = 0, block = 0, keep_first = 0, sinks = 0;
  int episodes = 0, segment = 0, medoids = 0;
  double alpha = 0, regroup = 0;
  std::string scoring, layer_budgets, heads, positions;
};

namespace {

using Type = ConfigField::Type;

// InfiniPot's general-purpose patched prompt (the paper's appendix A.2).
constexpr char kGenericPrompt[] =
    "Summarize the previous context highlighting the most important parts.";
constexpr int kSnapKvWindow = 64;  // SnapKV's observation window (appendix A.2)
// A patched prompt's tokens at most (its first ones): the paper's medoid segments are a few
// hundred tokens; an agent's messages may be far longer, and the prompt runs as one batch.
constexpr size_t kMaxPromptTokens = 1024;
constexpr uint64_t kClusterSeed = 0;

std::vector<ConfigField> Fields() {
  return {
      {"budget",
       Type::kInt,
       2048,
       16,
       1 << 20,
       {},
       0,
       "M: rows each KV head keeps per global layer (the layers share M x layers)"},
      {"block",
       Type::kInt,
       512,
       16,
       1 << 16,
       {},
       0,
       "M_block: history tokens prefilled between compressions"},
      {"episodes", Type::kInt, 4, 1, 64, {}, 0, "E: episodes the conversation is clustered into"},
      {"scoring",
       Type::kString,
       "episode",
       0,
       0,
       {"episode", "generic", "window", "keydiff", "recency"},
       0,
       "what scores rows: the episode's medoid (EpiCache), a generic prompt (InfiniPot), the "
       "block's last 64 tokens (SnapKV), key diversity (KeyDiff), recency (StreamingLLM)"},
      // Uniform by default: on Gemma-3, Eq. 10 gives the first global layer one row and costs
      // 1.96 nats of answer NLL (docs/eval/epicache.md).
      {"layer_budgets",
       Type::kString,
       "uniform",
       0,
       0,
       {"uniform", "sensitivity"},
       0,
       "M in every global layer, or budgets by measured sensitivity to block prefill (Eq. 10)"},
      {"alpha", Type::kNumber, 1.2, 0, 4, {}, 0, "sharpness of the sensitivity budgets"},
      {"heads",
       Type::kString,
       "uniform",
       0,
       0,
       {"uniform", "pair"},
       0,
       "each KV head keeps the layer's budget, or the layer's heads share it (pair)"},
      {"segment", Type::kInt, 4, 1, 64, {}, 0, "utterances per clustered segment"},
      {"medoids", Type::kInt, 2, 1, 16, {}, 0, "segments nearest the centroid in a patched prompt"},
      {"keep_first",
       Type::kInt,
       0,
       0,
       1 << 20,
       {},
       0,
       "first history tokens always kept (a system prompt), beyond the budget"},
      {"sinks", Type::kInt, 128, 0, 1 << 20, {}, 0, "recency: first rows kept within the budget"},
      {"regroup",
       Type::kNumber,
       2.0,
       0,
       1e6,
       {},
       0,
       "re-cluster and rebuild once the history grew this many times since the last clustering "
       "(0: only when asked)"},
      {"positions",
       Type::kString,
       "kept",
       0,
       0,
       {"kept", "compact"},
       0,
       "kept rows stay at their positions until the context runs out, or are always re-placed"},
  };
}

Result<Json> Parse(const PolicyEnv& env, const Json& config) {
  const std::vector<ConfigField> fields = Fields();
  KVMEM_ASSIGN_OR_RETURN(Json c, ReadConfig("epicache", fields, config, DefaultConfig(fields)));
  if (c.at("scoring") == "episode" && env.encoder == nullptr) {
    return InvalidArgument(
        "epicache config: 'scoring' \"episode\" clusters with a sentence encoder and this server "
        "has none (scripts/install_deps.sh --model minilm installs all-MiniLM-L6-v2)");
  }
  return c;
}

// Rows a region may need in any layer with this config: the budgets at their largest (Eq. 10
// may give one layer every global layer's share).
int64_t RegionBound(const model::ModelSpec& spec, const Json& c, int block_rows) {
  int64_t globals = 0, window = 0;
  for (const model::LayerSpec& l : spec.layers) {
    if (l.sliding_window > 0) {
      window = std::max<int64_t>(window, l.sliding_window);
    } else {
      ++globals;
    }
  }
  int64_t per_head = c.at("budget").get<int64_t>();
  if (c.at("layer_budgets") == "sensitivity") per_head *= std::max<int64_t>(globals, 1);
  if (c.at("heads") == "pair") per_head *= spec.n_kv_heads;
  const int64_t rows = std::max(per_head + c.at("keep_first").get<int64_t>(), window);
  return (rows + block_rows - 1) / block_rows * block_rows;
}

int64_t RowsNeeded(const PolicyEnv& env, const Json& c) {
  const model::ModelSpec& spec = env.model->spec();
  const int64_t episodes = c.at("scoring") == "episode" ? c.at("episodes").get<int64_t>() : 1;
  // Regions (rounded to the agents' 256-row blocks), a tail of up to two blocks, a turn.
  return episodes * RegionBound(spec, c, 256) + 2 * c.at("block").get<int64_t>() + env.n_ctx + 1024;
}

// s_l per model, profiled once per process for a model with a fingerprint (and cached on disk
// where presets live).
Result<std::vector<double>> Sensitivity(const PolicyEnv& env) {
  static std::mutex mu;
  static std::map<std::string, std::vector<double>> cache;  // by model fingerprint
  std::lock_guard<std::mutex> lock(mu);
  const std::string& key = env.model_fingerprint;
  if (auto it = cache.find(key); !key.empty() && it != cache.end()) return it->second;
  Result<std::vector<double>> s = [&] {
    const auto exclusive = env.compute->Exclusive();
    return LoadOrProfileSensitivity(*env.model, env.threads, *env.tok, env.model_fingerprint,
                                    env.presets_dir);
  }();
  if (s.ok() && !key.empty()) cache[key] = *s;
  return s;
}

}  // namespace

PolicyKind EpiCachePolicyKind() {
  PolicyKind k;
  k.name = "epicache";
  k.description =
      "EpiCache: a fixed KV budget from the first token; the conversation clustered into "
      "episodes, each a cache compressed by block prefill with its own prompt, each request "
      "answered on the nearest episode";
  k.fields = Fields();
  k.parse = Parse;
  k.presets = [](const PolicyEnv&) { return Json::object(); };
  k.rows_needed = RowsNeeded;
  k.rebuildable_from_prompt = false;  // the history is not in the prompts
  SetFactory<EpiCachePolicy>(&k);
  return k;
}

EpiCachePolicy::EpiCachePolicy(const PolicyEnv& env, kv::KvPool* pool)
    : env_(env), pool_(pool) {}

bool EpiCachePolicy::episodic() const { return settings().scoring == "episode"; }

Result<std::unique_ptr<EpiCachePolicy>> EpiCachePolicy::Make(const PolicyEnv& env,
                                                             const Json& config, kv::KvPool* pool,
                                                             StoredMemory stored) {
  std::unique_ptr<EpiCachePolicy> p(new EpiCachePolicy(env, pool));
  auto s = std::make_shared<Settings>();
  s->budget = config.at("budget").get<int64_t>();
  s->block = config.at("block").get<int64_t>();
  s->episodes = config.at("episodes").get<int>();
  s->scoring = config.at("scoring").get<std::string>();
  s->layer_budgets = config.at("layer_budgets").get<std::string>();
  s->alpha = config.at("alpha").get<double>();
  s->heads = config.at("heads").get<std::string>();
  s->segment = config.at("segment").get<int>();
  s->medoids = config.at("medoids").get<int>();
  s->keep_first = config.at("keep_first").get<int64_t>();
  s->sinks = config.at("sinks").get<int64_t>();
  s->regroup = config.at("regroup").get<double>();
  s->positions = config.at("positions").get<std::string>();
  p->settings_ = s;
  if (p->episodic() && env.encoder == nullptr) {
    return InvalidArgument("epicache: episodes need a sentence encoder");
  }

  const model::ModelSpec& spec = env.model->spec();
  CompressionConfig& c = p->compression_;
  c.heads = s->heads == "pair" ? HeadBudget::kPair : HeadBudget::kUniform;
  c.score = s->scoring == "keydiff"   ? RowScore::kKeyDiff
            : s->scoring == "recency" ? RowScore::kRecency
                                      : RowScore::kPromptAttention;
  c.window_prompt = s->scoring == "window" ? kSnapKvWindow : 0;
  c.keep_first = s->keep_first;
  c.sinks = s->sinks;
  c.max_batch = env.max_batch;
  c.lock = env.compute != nullptr ? &env.compute->mutex() : nullptr;
  std::vector<bool> global(static_cast<size_t>(spec.n_layers));
  for (int l = 0; l < spec.n_layers; ++l) global[l] = spec.layers[l].sliding_window == 0;
  if (s->layer_budgets == "sensitivity") {
    KVMEM_ASSIGN_OR_RETURN(std::vector<double> sens, Sensitivity(env));
    const std::unique_ptr<bool[]> eligible(new bool[global.size()]);
    for (size_t l = 0; l < global.size(); ++l) eligible[l] = global[l];
    c.layer_rows = AllocateLayerBudgets(sens, std::span<const bool>(eligible.get(), global.size()),
                                        s->alpha, s->budget);
  } else {
    c.layer_rows.assign(spec.n_layers, 0);
    for (int l = 0; l < spec.n_layers; ++l) c.layer_rows[l] = global[l] ? s->budget : 0;
  }
  const int br = pool->geometry().block_rows;
  p->capacity_ = (RegionCapacity(spec, c) + br - 1) / br * br;
  p->layer_need_.resize(spec.n_layers);
  for (int l = 0; l < spec.n_layers; ++l) {
    const int w = spec.layers[l].sliding_window;
    const int64_t per_head =
        c.heads == HeadBudget::kPair ? c.layer_rows[l] * spec.n_kv_heads : c.layer_rows[l];
    p->layer_need_[l] = w > 0 ? w : std::min(p->capacity_, per_head + c.keep_first);
  }
  p->empty_.n_layers = spec.n_layers;
  p->empty_.n_kv_heads = spec.n_kv_heads;
  p->empty_.pos.assign(static_cast<size_t>(spec.n_layers) * spec.n_kv_heads, {});
  p->text_ = std::move(stored.text);
  p->rows_ = stored.rows ? std::move(stored.rows) : std::make_unique<kv::KvSequence>(pool);
  p->rows_->set_window_release(false);
  if (!stored.state.empty()) {
    KVMEM_RETURN_IF_ERROR(p->RestoreState(stored.state, std::move(stored.tokens)));
  } else if (p->rows_->n_rows() != 0 || !p->text_.empty()) {
    return Corrupt("epicache: stored rows without the policy's state");
  }
  p->UpdateState();
  return p;
}

int EpiCachePolicy::Route(std::string_view text) const {
  if (!episodic() || episodes_.k <= 1) return 0;
  const std::vector<int32_t> ids = env_.tok->Encode(text, false, /*parse_special=*/true);
  Result<std::string> clean = env_.tok->Decode(ids);
  std::vector<std::string> one = {clean.ok() ? *clean : std::string(text)};
  std::vector<float> e;
  {
    const auto exclusive = env_.compute->Exclusive();
    e = env_.encoder->Embed(one, env_.threads);
  }
  return std::max(0, RouteToEpisode(episodes_, e));
}

std::vector<std::string> EpiCachePolicy::UtteranceTexts() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < utterances_.size(); ++i) {
    const size_t end = i + 1 < utterances_.size() ? utterances_[i + 1] : text_.size();
    const std::string_view raw =
        std::string_view(text_).substr(utterances_[i], end - utterances_[i]);
    Result<std::string> clean = env_.tok->Decode(env_.tok->Encode(raw, false, true));
    out.push_back(std::string(tokenizer::TrimPythonWhitespace(clean.ok() ? *clean : raw)));
  }
  return out;
}

std::vector<int32_t> EpiCachePolicy::PromptFor(int cache) const {
  if (settings().scoring == "generic") {
    return env_.tok->Encode(kGenericPrompt, false, false);
  }
  if (settings().scoring == "episode" && cache < static_cast<int>(prompts_.size())) {
    return prompts_[cache];
  }
  return {};
}

int64_t EpiCachePolicy::ReplaceAt() const {
  if (settings().positions == "compact") return 0;
  return env_.n_ctx - std::max<int64_t>(env_.n_ctx / 4, 2 * settings().block);
}

Result<TurnPlan> EpiCachePolicy::Plan(const TurnInput& input) const {
  TurnPlan plan;
  plan.match = store::MatchText(text_, input.prompt_text).kind;
  const std::string_view query_text = !text_.empty() && input.prompt_text.starts_with(text_)
                                          ? input.prompt_text.substr(text_.size())
                                          : input.prompt_text;
  if (query_text.empty()) {
    return InvalidArgument("the prompt adds nothing to the agent's conversation");
  }
  plan.kept_text_bytes = input.prompt_text.size() - query_text.size();
  plan.prompt_text = input.prompt_text;
  plan.prefill = env_.tok->Encode(query_text, /*add_special=*/text_.empty(), true);
  const auto n = static_cast<int64_t>(plan.prefill.size());
  if (n == 0) return InvalidArgument("the prompt is empty");
  if (next_pos_ + n >= env_.n_ctx) {
    return OutOfRange("the new part of the prompt has " + std::to_string(n) +
                      " tokens and the memory's positions reach " + std::to_string(next_pos_) +
                      " of the context's " + std::to_string(env_.n_ctx));
  }
  if (history_tokens_ + n > env_.max_history_tokens) {
    return ResourceExhausted("the agent's history holds " + std::to_string(history_tokens_) +
                             " tokens; this server keeps at most " +
                             std::to_string(env_.max_history_tokens));
  }
  plan.detail["episode"] =
      caches_.empty() ? -1 : Route(input.focus.empty() ? query_text : input.focus);
  return plan;
}

Json EpiCachePolicy::TurnReport(const TurnPlan& plan) const {
  const CompressedCache& c = routed_ >= 0 ? caches_[routed_] : empty_;
  const auto tail = static_cast<double>(tail_tokens_.size());
  const double turn = static_cast<double>(rows_->n_rows() - turn_first_row_);
  const double mean_kept =
      static_cast<double>(c.total_rows()) / static_cast<double>(std::max<size_t>(c.pos.size(), 1));
  Json r{
      {"episode", routed_},
      {"episodes", static_cast<int>(caches_.size())},
      {"scoring", settings().scoring},
      {"episode_rows", c.total_rows()},
      {"layer_budgets", compression_.layer_rows},
      {"history_tokens", history_tokens_},
      {"tail_tokens", static_cast<int64_t>(tail_tokens_.size())},
      {"prefill_tokens", static_cast<int64_t>(plan.prefill.size())},
      // Rows a decoded token reads, per (layer, KV head), mean: the episode's, the tail, the turn.
      {"kv_len_decode", mean_kept + tail + turn}};
  Json rows_read = Json::array();
  for (int l = 0; l < c.n_layers; ++l) rows_read.push_back(c.layer_rows(l) + tail + turn);
  r["rows_read"] = std::move(rows_read);
  return r;
}

Result<PromptAccount> EpiCachePolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  routed_ = plan.detail.value("episode", -1);
  if (routed_ >= static_cast<int>(caches_.size())) return Internal("epicache: stale plan");
  turn_first_row_ = rows_->n_rows();
  const CompressedCache& c = routed_ >= 0 ? caches_[routed_] : empty_;
  Status st;
  {
    const auto exclusive = env_.compute->Exclusive();
    st = PrefillOverCache(*env_.model, env_.threads, rows_.get(), c, tail_first_, plan.prefill,
                          next_pos_, env_.max_batch, logits);
  }
  if (!st.ok()) {
    rows_->Truncate(turn_first_row_);
    turn_first_row_ = -1;
    return st;
  }
  turn_tokens_ = plan.prefill;
  turn_text_.assign(plan.prompt_text.substr(plan.kept_text_bytes));
  context_ = tail_tokens_;
  context_.insert(context_.end(), plan.prefill.begin(), plan.prefill.end());
  report_ = TurnReport(plan);
  const int64_t read = static_cast<int64_t>(report_["kv_len_decode"].get<double>());
  return PromptAccount{read, read - static_cast<int64_t>(plan.prefill.size())};
}

bool EpiCachePolicy::CanStep() const {
  return next_pos_ + static_cast<int64_t>(turn_tokens_.size()) + 1 < env_.n_ctx;
}

Status EpiCachePolicy::Step(int32_t token, std::vector<float>* logits) {
  const int32_t one[] = {token};
  KVMEM_RETURN_IF_ERROR(env_.compute->Forward(
      rows_.get(), one, next_pos_ + static_cast<int64_t>(turn_tokens_.size()), false, logits));
  turn_tokens_.push_back(token);
  turn_text_.append(env_.Piece(token));
  context_.push_back(token);
  return Status::Ok();
}

Status EpiCachePolicy::Commit() {
  if (turn_first_row_ < 0) return FailedPrecondition("epicache: no open turn");
  // The turn's utterances: where it begins, and each chat message it opens after that.
  size_t at = text_.size();
  utterances_.push_back(at);
  for (size_t i = 0; i < turn_tokens_.size(); ++i) {
    const std::string_view piece = env_.Piece(turn_tokens_[i]);
    if (i > 0 && tokenizer::OpensChatMessage(piece) && at > utterances_.back()) {
      utterances_.push_back(at);
    }
    at += piece.size();
  }
  text_ += turn_text_;
  tail_tokens_.insert(tail_tokens_.end(), turn_tokens_.begin(), turn_tokens_.end());
  next_pos_ += static_cast<int64_t>(turn_tokens_.size());
  history_tokens_ += static_cast<int64_t>(turn_tokens_.size());
  turn_tokens_.clear();
  turn_text_.clear();
  turn_first_row_ = -1;
  const Status st = Maintain();
  UpdateState();
  return st;
}

void EpiCachePolicy::Abort() {
  if (turn_first_row_ >= 0) rows_->Truncate(turn_first_row_);
  turn_first_row_ = -1;
  turn_tokens_.clear();
  turn_text_.clear();
}

Status EpiCachePolicy::Maintain() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto tail = static_cast<int64_t>(tail_tokens_.size());
  std::string action;
  Status st;
  if (caches_.empty() && tail >= settings().block) {
    action = "build";
    st = RebuildFromText();
  } else if (tail >= settings().block) {
    action = "compress";
    st = CompressTailNow();
  }
  if (st.ok() && episodic() && settings().regroup > 0 && !caches_.empty() &&
      static_cast<double>(history_tokens_) >=
          settings().regroup * static_cast<double>(grouped_tokens_)) {
    action = "regroup";
    st = RebuildFromText();
  }
  if (st.ok() && !caches_.empty() && next_pos_ > ReplaceAt() &&
      next_pos_ - static_cast<int64_t>(tail_tokens_.size()) > capacity_) {
    action += action.empty() ? "replace" : "+replace";
    ReplaceAll();
  }
  maintenance_ = action.empty() ? Json(nullptr)
                                : Json{{"action", action},
                                       {"seconds", SecondsSince(t0)},
                                       {"history_tokens", history_tokens_}};
  if (!maintenance_.is_null()) report_["maintenance"] = maintenance_;
  return st;
}

Status EpiCachePolicy::CompressTailNow() {
  std::string tail_text;
  for (int32_t id : tail_tokens_) tail_text += env_.Piece(id);
  const int e = Route(tail_text);
  std::vector<int32_t> prompt = PromptFor(e);
  if (compression_.window_prompt > 0) {
    prompt.assign(tail_tokens_.end() - std::min<size_t>(tail_tokens_.size(), kSnapKvWindow),
                  tail_tokens_.end());
  }
  Status st;
  {
    const auto exclusive = env_.compute->Exclusive();
    st = CompressTail(*env_.model, env_.threads, rows_.get(), &caches_[e], tail_first_, next_pos_,
                      prompt, compression_);
  }
  if (!st.ok()) return st;
  for (CompressedCache& c : caches_) c.next_pos = next_pos_;
  rows_->Truncate(tail_first_);
  tail_tokens_.clear();
  return Status::Ok();
}

void EpiCachePolicy::ReplaceAll() {
  const auto exclusive = env_.compute->Exclusive();
  for (CompressedCache& c : caches_) Replace(*env_.model, rows_.get(), &c);
  // Every cache now ends at the capacity; the tail follows it.
  next_pos_ = capacity_;
  const std::vector<kv::RopeSpec> rope = env_.model->rope_specs();
  for (int64_t i = tail_first_; i < rows_->n_rows(); ++i) {
    rows_->pool()->Reposition(RowAt(*rows_, i), 1, next_pos_++, rope);
  }
  for (CompressedCache& c : caches_) c.next_pos = capacity_;
}

Status EpiCachePolicy::RebuildFromText() {
  const std::vector<std::string> utts = UtteranceTexts();
  // The history's tokens, each utterance encoded as it was ingested.
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < utterances_.size(); ++i) {
    const size_t end = i + 1 < utterances_.size() ? utterances_[i + 1] : text_.size();
    const std::vector<int32_t> part =
        env_.tok->Encode(std::string_view(text_).substr(utterances_[i], end - utterances_[i]),
                         /*add_special=*/i == 0, true);
    tokens.insert(tokens.end(), part.begin(), part.end());
  }
  int n_caches = 1;
  Episodes episodes;
  std::vector<std::vector<int32_t>> prompts;
  if (episodic()) {
    const std::vector<Segment> segments =
        SegmentUtterances(static_cast<int64_t>(utts.size()), settings().segment);
    std::vector<std::string> seg_text;
    for (const Segment& s : segments) {
      std::string t;
      for (int64_t u = s.first; u < s.end; ++u) t += (t.empty() ? "" : "\n") + utts[u];
      seg_text.push_back(std::move(t));
    }
    std::vector<float> emb;
    {
      const auto exclusive = env_.compute->Exclusive();
      emb = env_.encoder->Embed(seg_text, env_.threads);
    }
    const int dim = env_.encoder->dim();
    episodes = ClusterEpisodes(emb, static_cast<int>(segments.size()), dim, settings().episodes,
                               kClusterSeed);
    n_caches = std::max(1, episodes.k);
    for (int e = 0; e < episodes.k; ++e) {
      std::string p;
      for (int s : MedoidSegments(episodes, emb, e, settings().medoids)) {
        p += (p.empty() ? "" : "\n") + seg_text[s];
      }
      std::vector<int32_t> ids = env_.tok->Encode(p, false, false);
      if (ids.size() > kMaxPromptTokens) ids.resize(kMaxPromptTokens);
      prompts.push_back(std::move(ids));
    }
  }
  // Start over: the old rows go first, so the peak is the new caches and one block.
  caches_.clear();
  tail_tokens_.clear();
  rows_ = std::make_unique<kv::KvSequence>(pool_);
  rows_->set_window_release(false);
  episodes_ = std::move(episodes);
  prompts_ = std::move(prompts);
  const int64_t max_pos = ReplaceAt();
  for (int e = 0; e < n_caches; ++e) {
    KVMEM_ASSIGN_OR_RETURN(CompressedCache c, AllocateRegion(rows_.get(), capacity_, layer_need_));
    caches_.push_back(std::move(c));
  }
  tail_first_ = rows_->n_rows();
  for (int e = 0; e < n_caches; ++e) {
    const Status st =
        BuildCompressedCache(*env_.model, env_.threads, rows_.get(), &caches_[e], tokens, 0,
                             settings().block, PromptFor(e), compression_, max_pos);
    if (!st.ok()) {  // the memory starts over empty; the history text stays
      caches_.clear();
      rows_ = std::make_unique<kv::KvSequence>(pool_);
      rows_->set_window_release(false);
      tail_first_ = next_pos_ = 0;
      return st;
    }
  }
  next_pos_ = caches_.front().next_pos;
  history_tokens_ = grouped_tokens_ = static_cast<int64_t>(tokens.size());
  return Status::Ok();
}

Result<Json> EpiCachePolicy::Rebuild() {
  if (turn_first_row_ >= 0) return FailedPrecondition("epicache: a turn is open");
  const auto t0 = std::chrono::steady_clock::now();
  if (!text_.empty()) KVMEM_RETURN_IF_ERROR(RebuildFromText());
  maintenance_ = Json{{"action", "rebuild"},
                      {"seconds", SecondsSince(t0)},
                      {"history_tokens", history_tokens_},
                      {"episodes", static_cast<int>(caches_.size())}};
  UpdateState();
  return maintenance_;
}

Json EpiCachePolicy::Detail() const {
  const CompressedCache& c = routed_ >= 0 ? caches_[routed_] : empty_;
  Json lists = Json::array();
  const int64_t tail_begin = next_pos_ - static_cast<int64_t>(tail_tokens_.size());
  for (const std::vector<int64_t>& pos : c.pos) {
    std::vector<int64_t> rows = pos;
    for (int64_t p = tail_begin; p < next_pos_; ++p) rows.push_back(p);
    lists.push_back(RowRangesJson(rows));
  }
  return Json{{"kept", std::move(lists)}};
}

Json EpiCachePolicy::Inspect() const {
  Json parts = Json::array();
  const bool grouped = episodic() && !caches_.empty();
  const int per_segment = std::max(1, settings().segment);
  for (size_t i = 0; i < utterances_.size(); ++i) {
    const size_t end = i + 1 < utterances_.size() ? utterances_[i + 1] : text_.size();
    const int segment = static_cast<int>(i) / per_segment;
    Json episode = nullptr;
    if (grouped && segment < episodes_.n()) episode = episodes_.assignment[segment];
    parts.push_back({{"kind", "utterance"},
                     {"bytes", {utterances_[i], end}},
                     {"segment", segment},
                     {"episode", std::move(episode)}});
  }
  size_t tail_bytes = 0;
  for (int32_t id : tail_tokens_) tail_bytes += env_.Piece(id).size();
  tail_bytes = std::min(tail_bytes, text_.size());
  Json cached = Json::array();
  if (tail_bytes > 0) cached = Json::array({text_.size() - tail_bytes, text_.size()});
  return Json{{"cached", std::move(cached)},
              {"parts", std::move(parts)},
              {"note",
               "rows are kept per layer and KV head, so no span of the compressed history is held "
               "whole: cached is the uncompressed tail"}};
}

void EpiCachePolicy::UpdateState() {
  Json caches = Json::array();
  for (const CompressedCache& c : caches_) {
    caches.push_back({{"next_pos", c.next_pos}, {"positions", EncodePositions(c)}});
  }
  state_ = Json{{"version", 1},
                {"capacity", capacity_},
                {"layer_rows", compression_.layer_rows},
                {"caches", std::move(caches)},
                {"episodes", episodic() && !caches_.empty() ? EpisodesToJson(episodes_) : Json()},
                {"prompts", prompts_},
                {"utterances", utterances_},
                {"tail_first", tail_first_},
                {"next_pos", next_pos_},
                {"history_tokens", history_tokens_},
                {"grouped_tokens", grouped_tokens_}};
}

PersistedMemory EpiCachePolicy::Persist() const {
  persist_tokens_.assign(static_cast<size_t>(tail_first_), 0);
  persist_tokens_.insert(persist_tokens_.end(), tail_tokens_.begin(), tail_tokens_.end());
  PersistedMemory p;
  p.rows = rows_.get();
  p.tokens = persist_tokens_;
  p.text = text_;
  p.state = state_;
  return p;
}

Status EpiCachePolicy::RestoreState(const Json& s, std::vector<int32_t> tokens) {
  const auto bad = [](const std::string& why) { return Corrupt("epicache state: " + why); };
  const auto integer = [&](const char* key, int64_t lo, int64_t hi) -> Result<int64_t> {
    if (!s.contains(key) || !s[key].is_number_integer()) return bad(std::string(key) + " missing");
    const int64_t v = s[key].get<int64_t>();
    if (v < lo || v > hi) return bad(std::string(key) + " out of range");
    return v;
  };
  if (!s.is_object()) return bad("not an object");
  KVMEM_ASSIGN_OR_RETURN(int64_t version, integer("version", 1, 1));
  (void)version;
  KVMEM_ASSIGN_OR_RETURN(int64_t capacity, integer("capacity", 0, INT64_MAX));
  if (capacity != capacity_) return bad("region capacity differs from this config's");
  if (!s.contains("layer_rows") || s["layer_rows"] != Json(compression_.layer_rows)) {
    return bad("layer budgets differ from this config's on this model");
  }
  const int64_t n_rows = rows_->n_rows();
  KVMEM_ASSIGN_OR_RETURN(tail_first_, integer("tail_first", 0, n_rows));
  KVMEM_ASSIGN_OR_RETURN(next_pos_, integer("next_pos", 0, env_.n_ctx));
  KVMEM_ASSIGN_OR_RETURN(history_tokens_, integer("history_tokens", 0, INT64_MAX));
  KVMEM_ASSIGN_OR_RETURN(grouped_tokens_, integer("grouped_tokens", 0, INT64_MAX));
  if (!s.contains("caches") || !s["caches"].is_array()) return bad("caches missing");
  const Json& cs = s["caches"];
  if (static_cast<int64_t>(cs.size()) * capacity_ != tail_first_) {
    return bad("the caches' regions do not end where the tail begins");
  }
  if (static_cast<int64_t>(tokens.size()) != n_rows) return bad("tokens do not cover the rows");
  tail_tokens_.assign(tokens.begin() + tail_first_, tokens.end());
  if (next_pos_ < static_cast<int64_t>(tail_tokens_.size())) return bad("next_pos before the tail");
  for (size_t i = 0; i < cs.size(); ++i) {
    CompressedCache c = empty_;
    c.first_row = static_cast<int64_t>(i) * capacity_;
    c.capacity = capacity_;
    if (!cs[i].is_object() || !cs[i].contains("next_pos") ||
        !cs[i]["next_pos"].is_number_integer() || !cs[i].contains("positions") ||
        !cs[i]["positions"].is_string()) {
      return bad("caches[" + std::to_string(i) + "] malformed");
    }
    c.next_pos = cs[i]["next_pos"].get<int64_t>();
    if (c.next_pos < 0 || c.next_pos > next_pos_) return bad("a cache reaches past the history");
    KVMEM_RETURN_IF_ERROR(DecodePositions(cs[i]["positions"].get<std::string>(), &c));
    for (int l = 0; l < c.n_layers; ++l) {
      if (c.layer_rows(l) > layer_need_[l]) return bad("a layer keeps more rows than its budget");
    }
    // Every row a cache reads must have its layer's storage (a file may say it was released).
    const kv::KvPool& pool = *rows_->pool();
    const int64_t br = pool.geometry().block_rows;
    for (int l = 0; l < c.n_layers; ++l) {
      for (int64_t r = 0; r < c.layer_rows(l); r += br) {
        if (!pool.has_layer(RowAt(*rows_, c.first_row + r).block, l)) {
          return bad("a cache reads rows of layer " + std::to_string(l) + " the store released");
        }
      }
    }
    caches_.push_back(std::move(c));
  }
  for (int64_t r = tail_first_; r < n_rows; r += rows_->pool()->geometry().block_rows) {
    if (!rows_->pool()->has_all_layers(RowAt(*rows_, r).block)) {
      return bad("the tail's rows lack a layer");
    }
  }
  if (!s.contains("utterances") || !s["utterances"].is_array()) return bad("utterances missing");
  size_t prev = 0;
  for (const Json& u : s["utterances"]) {
    if (!u.is_number_unsigned() || u.get<size_t>() > text_.size() || u.get<size_t>() < prev) {
      return bad("utterance offsets are not ascending within the text");
    }
    prev = u.get<size_t>();
    utterances_.push_back(prev);
  }
  if (!s.contains("prompts") || !s["prompts"].is_array()) return bad("prompts missing");
  for (const Json& p : s["prompts"]) {
    if (!p.is_array()) return bad("a prompt is not a list of token ids");
    std::vector<int32_t> ids;
    for (const Json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() >= env_.tok->vocab_size()) {
        return bad("a prompt token is outside the vocabulary");
      }
      ids.push_back(t.get<int32_t>());
    }
    prompts_.push_back(std::move(ids));
  }
  if (episodic() && !caches_.empty()) {
    if (!s.contains("episodes")) return bad("episodes missing");
    KVMEM_ASSIGN_OR_RETURN(episodes_, EpisodesFromJson(s["episodes"], env_.encoder->dim()));
    if (std::max(1, episodes_.k) != static_cast<int>(caches_.size()) ||
        prompts_.size() != static_cast<size_t>(episodes_.k)) {
      return bad("episodes, prompts and caches disagree");
    }
  }
  return Status::Ok();
}

}  // namespace kvmem::memory
