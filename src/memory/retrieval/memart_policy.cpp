#include "memory/retrieval/memart_policy.h"

#include <algorithm>
#include <mutex>

#include "core/log.h"
#include "engine/forward.h"
#include "memory/retrieval/memart_presets.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/token_span.h"

namespace kvmem::memory {
namespace {

using Type = ConfigField::Type;

std::vector<ConfigField> Fields() {
  return {
      {"preset", Type::kString, "auto", 0, 0, {"auto", "model", "paper"}, 64,
       "base of the other fields: the model's evaluated preset (model), the paper's per-layer "
       "retrieval (paper), or model when this model has one (auto)"},
      {"block_size", Type::kInt, 16, 8, 32, {}, 0, "rows per memory block: 8, 16 or 32"},
      {"top_k", Type::kInt, 32, 1, 4096, {}, 0,
       "blocks read per layer beyond the always-kept ones"},
      {"strategy", Type::kString, "softmax-sum", 0, 0,
       {"softmax-sum", "softmax-max", "rr-sum", "rr-max", "softmax-sum-exact",
        "softmax-max-exact", "rr-sum-exact", "rr-max-exact"},
       64,
       "block score normalization and aggregation (Table 1); -exact scores by the exact max of "
       "q.k over a block's keys instead of its box bound"},
      {"keep_first", Type::kInt, 0, 0, 65536, {}, 0,
       "tokens at the start of the history always read (a system prompt)"},
      {"keep_last", Type::kInt, 0, 0, 65536, {}, 0, "most recent history tokens always read"},
      {"neighbors", Type::kInt, 0, 0, 64, {}, 0,
       "adjacent blocks each found block brings, within top_k"},
      {"heads", Type::kStringList, Json::array(), 256, 256, {}, 16,
       "LAYER.HEAD query heads that choose one block set for every layer (empty: each layer "
       "chooses its own, as the paper)"},
  };
}

// Manifests before the seam: {"mode": "retrieval", block_size, top_k, strategy, keep_first,
// keep_last, neighbors?, turn_bounded?, whole_turns?, retrieval_heads?}. turn_bounded and
// whole_turns measured no gain and left the product (docs/eval/memart.md); an agent that had
// them keeps its memory and reads blocks with neighbours.
Result<Json> Upgrade(const Json& legacy) {
  Json c = Json::object();
  for (const char* key : {"block_size", "top_k", "strategy", "keep_first", "keep_last",
                          "neighbors"}) {
    if (legacy.contains(key)) c[key] = legacy[key];
  }
  if (legacy.contains("retrieval_heads")) c["heads"] = legacy["retrieval_heads"];
  for (const char* key : {"turn_bounded", "whole_turns"}) {
    if (legacy.value(key, false) == true) {
      KVMEM_LOG_WARN("memart: a stored '%s' setting is no longer offered; ignored", key);
    }
  }
  c["preset"] = "paper";  // every field it had was explicit
  return c;
}

// A stored config names every field: it no longer needs the preset it was made from.
bool AllFieldsGiven(const std::vector<ConfigField>& fields, const Json& config) {
  for (const ConfigField& f : fields) {
    if (!config.contains(f.name)) return false;
  }
  return true;
}

Result<Json> Parse(const PolicyEnv& env, const Json& config) {
  const std::vector<ConfigField> fields = Fields();
  Json base = DefaultConfig(fields);
  std::string preset = "auto";
  if (config.is_object() && config.contains("preset") && config["preset"].is_string()) {
    preset = config["preset"].get<std::string>();
  }
  if (preset == "auto" || preset == "model") {
    KVMEM_ASSIGN_OR_RETURN(std::optional<MemArtPreset> found,
                           FindMemArtPreset(env.presets_dir, env.model_fingerprint));
    if (found) {
      for (const auto& [k, v] : found->fields.items()) {
        if (!base.contains(k) || k == "preset") {
          return Corrupt("memart preset " + found->source + ": unknown field '" + k + "'");
        }
        base[k] = v;
      }
      preset = "model";
    } else if (preset == "model" && !AllFieldsGiven(fields, config)) {
      return InvalidArgument("memart config: no preset for this model (kvmem calibrate memart "
                             "-m MODEL writes one)");
    } else if (preset == "auto") {
      preset = "paper";
    }
  }
  Json given = config;
  if (given.is_object() && given.contains("preset") && given["preset"].is_string()) {
    given["preset"] = preset;
  }
  KVMEM_ASSIGN_OR_RETURN(Json out, ReadConfig("memart", fields, given, base));
  out["preset"] = preset;
  KVMEM_ASSIGN_OR_RETURN(MemArtConfig c, MemArtConfigOf(out));
  if (env.model != nullptr) KVMEM_RETURN_IF_ERROR(MemArtMemory::CheckHeads(env.model->spec(), c));
  return out;
}

int64_t RowsNeeded(const PolicyEnv& env, const Json& config) {
  // The history and one context of working rows, each with a partial block.
  return env.max_history_tokens + env.n_ctx + 2 * config.value("block_size", 16);
}

// The text after the agent's conversation when the prompt continues it (a client that resends
// the whole conversation), else the whole prompt (a client that sends only what is new).
std::string_view QueryText(const std::string& history, std::string_view prompt,
                           store::PrefixMatchKind* kind) {
  *kind = store::MatchText(history, prompt).kind;
  if (history.empty() || !prompt.starts_with(history)) return prompt;
  return prompt.substr(history.size());
}

}  // namespace

Result<MemArtConfig> MemArtConfigOf(const Json& config) {
  MemArtConfig c;
  c.block_size = config.at("block_size").get<int>();
  c.top_k = config.at("top_k").get<int>();
  KVMEM_ASSIGN_OR_RETURN(c.strategy, ParseStrategy(config.at("strategy").get<std::string>()));
  c.keep_first = config.at("keep_first").get<int>();
  c.keep_last = config.at("keep_last").get<int>();
  c.neighbors = config.at("neighbors").get<int>();
  for (const Json& h : config.at("heads")) {
    auto ref = ParseHeadRef(h.get<std::string>());
    if (!ref.ok()) return InvalidArgument("memart config: 'heads': " + ref.status().message());
    c.retrieval_heads.push_back(*ref);
  }
  Status st = ValidateMemArtConfig(c);
  if (!st.ok()) return InvalidArgument("memart config: " + st.message());
  return c;
}

PolicyKind MemArtPolicyKind() {
  PolicyKind k;
  k.name = "memart";
  k.aliases = {"retrieval"};
  k.description =
      "MemArt: the history as KV blocks; each layer reads the blocks its attention retrieves, "
      "re-positioned before the new tokens, so the history may outgrow the context";
  k.fields = Fields();
  k.parse = Parse;
  k.presets = [](const PolicyEnv& env) {
    Json out = Json::object();
    out["paper"] = Json::object();
    auto found = FindMemArtPreset(env.presets_dir, env.model_fingerprint);
    if (found.ok() && *found) out["model"] = (*found)->fields;
    return out;
  };
  k.rows_needed = RowsNeeded;
  k.rebuildable_from_prompt = false;  // the history is not in the prompts
  SetFactory<MemArtPolicy>(&k);
  k.upgrade = Upgrade;
  return k;
}

Result<std::unique_ptr<MemArtPolicy>> MemArtPolicy::Make(const PolicyEnv& env, const Json& config,
                                                         kv::KvPool* pool, StoredMemory stored) {
  if (!stored.state.empty()) return Corrupt("memart keeps no state beyond its rows");
  KVMEM_ASSIGN_OR_RETURN(MemArtConfig c, MemArtConfigOf(config));
  std::unique_ptr<MemArtPolicy> p(new MemArtPolicy(env, pool, config));
  p->tokens_ = std::move(stored.tokens);
  p->text_ = std::move(stored.text);
  std::unique_ptr<kv::KvSequence> rows =
      stored.rows ? std::move(stored.rows) : std::make_unique<kv::KvSequence>(pool);
  // The history's turns: every message the chat template opened (the turns are not stored;
  // the messages are in the tokens).
  const std::vector<int64_t> starts = p->MessageStarts(p->tokens_, rows->n_rows());
  KVMEM_ASSIGN_OR_RETURN(p->memart_,
                         MemArtMemory::Restore(*env.model, pool, c, std::move(rows), starts));
  // Where each token's text ends: its piece lengths summed (within the stored text).
  size_t end = 0;
  for (int32_t id : p->tokens_) {
    end = std::min(p->text_.size(), end + env.Piece(id).size());
    p->token_ends_.push_back(end);
  }
  if (config.at("preset") == "paper") {
    auto preset = FindMemArtPreset(env.presets_dir, env.model_fingerprint);
    if (preset.ok() && !*preset) {
      static std::once_flag logged;
      std::call_once(logged, [] {
        KVMEM_LOG_WARN("memart: this model has no preset; agents use the paper's per-layer "
                       "retrieval (kvmem calibrate memart -m MODEL writes one)");
      });
      p->report_ = Json{{"note",
                         "the paper's per-layer retrieval: this model has no preset (kvmem "
                         "calibrate memart writes one)"}};
    }
  }
  return p;
}

std::vector<int64_t> MemArtPolicy::MessageStarts(std::span<const int32_t> tokens,
                                                 int64_t limit) const {
  std::vector<int64_t> starts;
  for (size_t i = 0; i < tokens.size() && static_cast<int64_t>(i) < limit; ++i) {
    if (tokenizer::OpensChatMessage(env_.Piece(tokens[i]))) starts.push_back(i);
  }
  return starts;
}

Result<tokenizer::TokenSpan> MemArtPolicy::FocusTokens(std::string_view query_text,
                                             std::span<const int32_t> ids,
                                             std::string_view focus) const {
  // ids may open with a BOS the text does not spell.
  const std::vector<int32_t> plain =
      env_.tok->Encode(query_text, /*add_special=*/false, /*parse_special=*/true);
  const auto lead = static_cast<int64_t>(ids.size()) - static_cast<int64_t>(plain.size());
  if (lead < 0 || !std::equal(plain.begin(), plain.end(), ids.begin() + lead)) {
    return Internal("the prompt's tokens do not end with its text's");
  }
  Result<tokenizer::TokenSpan> span =
      tokenizer::FindTokenSpan(*env_.tok, query_text, plain, focus);
  if (!span.ok()) {
    return InvalidArgument("'retrieval_query' is not in what the prompt adds to the agent's "
                           "conversation (" + span.status().message() + ")");
  }
  const tokenizer::TokenSpan r{lead + span->begin, lead + span->end};
  if (r.begin >= r.end) return InvalidArgument("'retrieval_query' covers no token of the prompt");
  return r;
}

Result<TurnPlan> MemArtPolicy::Plan(const TurnInput& input) const {
  TurnPlan plan;
  const std::string_view query_text = QueryText(text_, input.prompt_text, &plan.match);
  if (query_text.empty()) {
    return InvalidArgument("the prompt adds nothing to the agent's conversation");
  }
  plan.kept_text_bytes = input.prompt_text.size() - query_text.size();
  plan.prompt_text = input.prompt_text;
  plan.prefill =
      env_.tok->Encode(query_text, /*add_special=*/tokens_.empty(), /*parse_special=*/true);
  const int64_t n = static_cast<int64_t>(plan.prefill.size());
  if (n == 0) return InvalidArgument("the prompt is empty");
  if (n >= env_.n_ctx) {
    return OutOfRange("the new part of the prompt has " + std::to_string(n) +
                      " tokens; the context holds " + std::to_string(env_.n_ctx));
  }
  if (memart_->history_rows() + env_.n_ctx > env_.max_history_tokens) {
    return ResourceExhausted("the agent's memory holds " + std::to_string(memart_->history_rows()) +
                             " tokens; this server keeps at most " +
                             std::to_string(env_.max_history_tokens) +
                             " (with one context of room for the turn)");
  }
  if (!input.focus.empty()) {
    KVMEM_ASSIGN_OR_RETURN(plan.focus, FocusTokens(query_text, plan.prefill, input.focus));
  }
  return plan;
}

Json MemArtPolicy::TurnReport(const RetrievalReport& rep, const TurnPlan& plan) const {
  const int64_t n = static_cast<int64_t>(plan.prefill.size());
  Json blocks = Json::array();
  const int64_t bs = memart_->config().block_size;
  const std::vector<RowSpan> read = rep.RowsRead();
  for (const auto& [block, layers] : rep.BlockVotes()) {
    for (const RowSpan& s : read) {
      const int64_t first = std::max(s.begin, block * bs);
      const int64_t end = std::min(s.end, (block + 1) * bs);
      if (first >= end) continue;
      const size_t from = first == 0 ? 0 : token_ends_[first - 1];
      blocks.push_back({{"block", block},
                        {"first_token", first},
                        {"n_tokens", end - first},
                        {"layers", layers},
                        {"text", text_.substr(from, token_ends_[end - 1] - from)}});
    }
  }
  Json r{{"history_tokens", rep.history_rows},
         {"retrieved_rows", rep.retrieved_rows},
         {"prefill_tokens", n},
         {"kv_len_decode", memart_->working()->n_rows()},
         {"scoring_tokens", {plan.focus.begin, plan.focus.end < 0 ? n : plan.focus.end}},
         {"preset", config_.at("preset")},
         {"blocks", std::move(blocks)}};
  if (report_.contains("note")) r["note"] = report_["note"];
  return r;
}

Result<PromptAccount> MemArtPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  const std::span<const int32_t> ids = plan.prefill;
  RetrievalReport rep;
  {
    const auto exclusive = env_.compute->Exclusive();  // retrieval taps in every layer
    KVMEM_RETURN_IF_ERROR(memart_->BeginTurn(ids, env_.threads, &rep, plan.focus, logits));
  }
  if (memart_->working()->n_rows() >= env_.n_ctx) {
    (void)memart_->EndTurn(/*keep=*/false);
    return OutOfRange("the retrieved history (" + std::to_string(rep.retrieved_rows) +
                      " rows) and the prompt's " + std::to_string(ids.size()) +
                      " new tokens do not fit the context of " + std::to_string(env_.n_ctx));
  }
  rows_read_ = rep.rows;
  block_ranks_ = Json::array();
  for (const auto& [block, votes] : rep.BlockVotes()) {
    Json ranks = Json::array(), read_in = Json::array();
    for (size_t l = 0; l < rep.ranks.size(); ++l) {
      const std::vector<int32_t>& layer = rep.ranks[l];
      ranks.push_back(static_cast<size_t>(block) < layer.size() ? layer[block] : 0);
      if (std::binary_search(rep.blocks[l].begin(), rep.blocks[l].end(), block)) {
        read_in.push_back(l);
      }
    }
    block_ranks_.push_back(
        {{"block", block}, {"ranks", std::move(ranks)}, {"layers", std::move(read_in)}});
  }
  report_ = TurnReport(rep, plan);
  // The turn's tokens and text as they join the history: the query, then each kept reply token.
  turn_tokens_.assign(ids.begin(), ids.end());
  turn_text_.assign(plan.prompt_text.substr(plan.kept_text_bytes));
  turn_ends_.clear();
  size_t end = text_.size();
  for (int32_t id : ids) {
    end = std::min(text_.size() + turn_text_.size(), end + env_.Piece(id).size());
    turn_ends_.push_back(end);
  }
  context_ = tokens_;
  context_.insert(context_.end(), ids.begin(), ids.end());
  return PromptAccount{rep.retrieved_rows + static_cast<int64_t>(ids.size()), rep.retrieved_rows};
}

bool MemArtPolicy::CanStep() const { return memart_->working()->n_rows() + 1 < env_.n_ctx; }

Status MemArtPolicy::Step(int32_t token, std::vector<float>* logits) {
  const int32_t one[] = {token};
  KVMEM_RETURN_IF_ERROR(
      env_.compute->Forward(memart_->working(), one, memart_->next_position(), false, logits));
  turn_tokens_.push_back(token);
  turn_text_.append(env_.Piece(token));
  turn_ends_.push_back(text_.size() + turn_text_.size());
  context_.push_back(token);
  return Status::Ok();
}

Status MemArtPolicy::Commit() {
  // The history's turns are the chat messages (as Make finds them in stored tokens).
  KVMEM_RETURN_IF_ERROR(
      memart_->EndTurn(/*keep=*/true, MessageStarts(turn_tokens_, memart_->turn_rows())));
  tokens_.insert(tokens_.end(), turn_tokens_.begin(), turn_tokens_.end());
  text_ += turn_text_;
  token_ends_.insert(token_ends_.end(), turn_ends_.begin(), turn_ends_.end());
  turn_tokens_.clear();
  turn_text_.clear();
  turn_ends_.clear();
  return Status::Ok();
}

void MemArtPolicy::Abort() {
  (void)memart_->EndTurn(/*keep=*/false);
  turn_tokens_.clear();
  turn_text_.clear();
  turn_ends_.clear();
}

Json MemArtPolicy::Detail() const {
  Json layers = Json::array();
  for (const std::vector<RowSpan>& spans : rows_read_) {
    Json flat = Json::array();
    for (const RowSpan& s : spans) {
      flat.push_back(s.begin);
      flat.push_back(s.end);
    }
    layers.push_back(std::move(flat));
  }
  return Json{{"rows_read", std::move(layers)}, {"ranks", block_ranks_}};
}

Json MemArtPolicy::Inspect() const {
  Json parts = Json::array();
  const auto n = static_cast<int64_t>(tokens_.size());
  const int64_t bs = memart_->config().block_size;
  for (int64_t b = 0; b * bs < n; ++b) {
    const int64_t end = std::min(n, (b + 1) * bs);
    parts.push_back({{"kind", "block"},
                     {"block", b},
                     {"tokens", {b * bs, end}},
                     {"bytes", TokenBytesJson(token_ends_, b * bs, end)}});
  }
  Json cached = text_.empty() ? Json::array() : Json::array({0, text_.size()});
  return Json{{"cached", std::move(cached)}, {"parts", std::move(parts)}};
}

PersistedMemory MemArtPolicy::Persist() const {
  PersistedMemory p;
  p.rows = &memart_->history();
  p.tokens = tokens_;
  p.text = text_;
  p.token_ends = token_ends_;
  return p;
}

}  // namespace kvmem::memory
