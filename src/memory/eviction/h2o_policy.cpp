#include "memory/eviction/h2o_policy.h"

#include <cstring>

#include "core/base64.h"
#include "engine/forward.h"

namespace kvmem::memory {
namespace {

using Type = ConfigField::Type;

std::vector<ConfigField> Fields() {
  return {
      {"budget",
       Type::kInt,
       256,
       1,
       1 << 20,
       {},
       0,
       "history rows each (layer, KV head) reads, beyond the turn's own"},
      {"recent_ratio",
       Type::kNumber,
       0.5,
       0,
       1,
       {},
       0,
       "share of the budget given to the most recent rows; the rest to the heaviest hitters"},
  };
}

std::string Base64(const std::vector<double>& v) {
  return Base64Encode(
      std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double)));
}

Result<std::vector<double>> FromBase64(const std::string& s) {
  KVMEM_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(s, "h2o state: scores"));
  if (bytes.size() % sizeof(double) != 0) return Corrupt("h2o state: scores are not doubles");
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

Result<Json> Parse(const PolicyEnv&, const Json& config) {
  const std::vector<ConfigField> fields = Fields();
  return ReadConfig("h2o", fields, config, DefaultConfig(fields));
}

H2oConfig ConfigOf(const Json& config) {
  return H2oConfig{config.at("budget").get<int64_t>(), config.at("recent_ratio").get<double>()};
}

}  // namespace

PolicyKind H2oPolicyKind() {
  PolicyKind k = PromptCacheKind(
      "h2o",
      "H2O: the full cache, each (layer, KV head) reading a budget of recent and heavy-hitter "
      "rows (accumulated attention); rows are hidden, not moved, so prefixes still match");
  k.fields = Fields();
  k.parse = Parse;
  SetFactory<H2oPolicy>(&k);
  return k;
}

H2oPolicy::H2oPolicy(const PolicyEnv& env, kv::KvPool* pool, H2oConfig config, StoredMemory stored)
    : FullPolicy(env, pool, std::move(stored.rows), std::move(stored.tokens),
                 std::move(stored.text)),
      config_(config),
      scores_(env.model->spec()),
      saved_scores_(env.model->spec()) {}

Result<std::unique_ptr<H2oPolicy>> H2oPolicy::Make(const PolicyEnv& env, const Json& config,
                                                   kv::KvPool* pool, StoredMemory stored) {
  Json state = std::move(stored.state);
  std::unique_ptr<H2oPolicy> p(new H2oPolicy(env, pool, ConfigOf(config), std::move(stored)));
  if (!state.empty()) KVMEM_RETURN_IF_ERROR(p->RestoreState(state));
  p->state_ = std::move(state);
  return p;
}

Result<PromptAccount> H2oPolicy::Apply(const TurnPlan& plan, std::vector<float>* logits) {
  KeepPrefix(plan);
  scores_.Truncate(plan.kept_rows);
  const int64_t before = seq_->n_rows();
  // What Abort puts back: the lists (eviction hides rows in them) and the scores (the prompt's
  // attention adds to the history's).
  saved_scores_ = scores_;
  saved_lists_.clear();
  for (int l = 0; l < scores_.n_layers(); ++l) {
    for (int g = 0; g < scores_.n_kv_heads(); ++g) saved_lists_.push_back(seq_->view().list(l, g));
  }
  // The prompt but its last token, scored; then the eviction; then the last token over what is
  // left, scored too (its logits start the reply).
  const std::span<const int32_t> ids = plan.prefill;
  const auto run = [&](std::span<const int32_t> part, std::vector<float>* out) -> Status {
    const int64_t at = seq_->n_rows();
    Status st;
    {
      const auto exclusive = env_.compute->Exclusive();  // a tap in every layer
      st = ForwardScored(*env_.model, env_.threads, seq_.get(), part, at, &scores_, env_.max_batch,
                         out);
    }
    if (!st.ok()) return st;
    tokens_.insert(tokens_.end(), part.begin(), part.end());
    for (int32_t id : part) text_.append(env_.Piece(id));
    return Status::Ok();
  };
  if (ids.size() > 1) KVMEM_RETURN_IF_ERROR(run(ids.first(ids.size() - 1), nullptr));
  // Rows never scored (the replies) score 0.
  if (scores_.n_rows() < before) scores_.AddWeight(0, 0, before - 1, 0.0);
  const H2oPlan evict = PlanH2o(scores_, *seq_, before, config_);
  ApplyH2o(evict, seq_.get());
  KVMEM_RETURN_IF_ERROR(run(ids.last(1), logits));
  text_.assign(plan.prompt_text);
  kept_ = evict.kept;
  report_ = BaseReport(plan);
  double read = 0;
  for (const std::vector<int64_t>& kept : evict.kept) read += static_cast<double>(kept.size());
  read /= static_cast<double>(std::max<size_t>(evict.kept.size(), 1));
  const int64_t turn_rows = seq_->n_rows() - before;
  report_["budget"] = config_.budget;
  report_["history_rows_read"] = read;  // per (layer, KV head), mean
  report_["kv_len_decode"] = read + static_cast<double>(turn_rows);
  return PromptAccount{seq_->n_rows(), plan.kept_rows};
}

void H2oPolicy::Abort() {
  FullPolicy::Abort();
  if (saved_lists_.empty()) return;
  scores_ = saved_scores_;
  size_t i = 0;
  for (int l = 0; l < scores_.n_layers(); ++l) {
    for (int g = 0; g < scores_.n_kv_heads(); ++g)
      seq_->view().mutable_head(l, g) = saved_lists_[i++];
  }
  saved_lists_.clear();
}

Json H2oPolicy::Detail() const {
  Json lists = Json::array();
  for (const std::vector<int64_t>& rows : kept_) lists.push_back(RowRangesJson(rows));
  return Json{{"kept", std::move(lists)}};
}

std::vector<std::pair<int64_t, int64_t>> H2oPolicy::Evicted(int layer, int head) const {
  const int block_rows = pool_->geometry().block_rows;
  const std::vector<int32_t> slot_of = BlockSlots(*seq_);
  std::vector<char> live(static_cast<size_t>(seq_->n_rows()), 0);
  for (const kv::ViewRun& run : seq_->view().list(layer, head)) {
    const int32_t slot = run.dead() ? -1 : slot_of[run.block];
    if (slot < 0) continue;
    for (int32_t j = 0; j < run.n_rows; ++j) {
      const int64_t i = int64_t{slot} * block_rows + run.first_row + j;
      if (i < static_cast<int64_t>(live.size())) live[i] = 1;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < static_cast<int64_t>(live.size()); ++i) {
    if (live[i]) continue;
    if (!out.empty() && out.back().second == i) {
      ++out.back().second;
    } else {
      out.push_back({i, i + 1});
    }
  }
  return out;
}

Status H2oPolicy::Commit() {
  KVMEM_RETURN_IF_ERROR(FullPolicy::Commit());
  saved_lists_.clear();
  const int n_layers = scores_.n_layers(), n_heads = scores_.n_kv_heads();
  std::vector<double> all;
  Json evicted = Json::array();
  for (int l = 0; l < n_layers; ++l) {
    for (int g = 0; g < n_heads; ++g) {
      const std::span<const double> s = scores_.of(l, g);
      all.insert(all.end(), s.begin(), s.end());
      Json ranges = Json::array();
      for (const auto& [b, e] : Evicted(l, g)) {
        ranges.push_back(b);
        ranges.push_back(e);
      }
      evicted.push_back(std::move(ranges));
    }
  }
  state_ = Json{{"scored_rows", scores_.n_rows()}, {"scores", Base64(all)}, {"evicted", evicted}};
  return Status::Ok();
}

Status H2oPolicy::RestoreState(const Json& state) {
  const int n_layers = scores_.n_layers(), n_heads = scores_.n_kv_heads();
  const size_t n_lists = static_cast<size_t>(n_layers) * n_heads;
  const int64_t n_rows = seq_->n_rows();
  if (!state.contains("scored_rows") || !state["scored_rows"].is_number_integer() ||
      !state.contains("scores") || !state["scores"].is_string() || !state.contains("evicted") ||
      !state["evicted"].is_array() || state["evicted"].size() != n_lists) {
    return Corrupt(
        "h2o state: expected scored_rows, scores and evicted (one list per layer "
        "and KV head)");
  }
  const int64_t scored = state["scored_rows"].get<int64_t>();
  if (scored < 0 || scored > n_rows) {
    return Corrupt("h2o state: scored_rows outside the cache's " + std::to_string(n_rows));
  }
  KVMEM_ASSIGN_OR_RETURN(std::vector<double> all, FromBase64(state["scores"].get<std::string>()));
  if (all.size() != n_lists * static_cast<size_t>(scored)) {
    return Corrupt("h2o state: scores do not cover scored_rows for every list");
  }
  const int block_rows = pool_->geometry().block_rows;
  for (int l = 0; l < n_layers; ++l) {
    for (int g = 0; g < n_heads; ++g) {
      const size_t li = static_cast<size_t>(l) * n_heads + g;
      scores_.Set(l, g,
                  std::vector<double>(all.begin() + li * scored, all.begin() + (li + 1) * scored));
      const Json& ranges = state["evicted"][li];
      if (!ranges.is_array() || ranges.size() % 2 != 0) {
        return Corrupt("h2o state: evicted[" + std::to_string(li) + "] is not a list of pairs");
      }
      int64_t prev = 0;
      for (size_t k = 0; k < ranges.size(); k += 2) {
        if (!ranges[k].is_number_integer() || !ranges[k + 1].is_number_integer()) {
          return Corrupt("h2o state: evicted rows must be integers");
        }
        const int64_t b = ranges[k].get<int64_t>(), e = ranges[k + 1].get<int64_t>();
        if (b < prev || e <= b || e > n_rows) {
          return Corrupt("h2o state: evicted[" + std::to_string(li) +
                         "] is not ascending ranges within the cache");
        }
        prev = e;
        for (int64_t i = b; i < e;) {
          const int32_t row = static_cast<int32_t>(i % block_rows);
          const int n = static_cast<int>(std::min<int64_t>(block_rows - row, e - i));
          seq_->view().Hide({seq_->blocks()[i / block_rows], row}, n, l, g);
          i += n;
        }
      }
    }
  }
  return Status::Ok();
}

PersistedMemory H2oPolicy::Persist() const {
  PersistedMemory p = FullPolicy::Persist();
  p.state = state_;
  return p;
}

}  // namespace kvmem::memory
