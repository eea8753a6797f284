#include "memory/segments/blend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "engine/forward.h"
#include "memory/segments/importance.h"
#include "memory/segments/segment_rows.h"

namespace kvmem::memory::segments {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

constexpr int kPrefix = -1;
constexpr int kQuery = -2;

// Which part of the working sequence each of its rows belongs to: kPrefix, kQuery or a segment.
// Indexed by pool block id: a lookup per attended row stays cheap.
class RowOwners {
 public:
  explicit RowOwners(const kv::KvSequence& seq) : block_rows_(seq.pool()->geometry().block_rows) {
    base_.assign(static_cast<size_t>(seq.pool()->max_blocks()), -1);
    for (size_t i = 0; i < seq.blocks().size(); ++i)
      base_[static_cast<size_t>(seq.blocks()[i])] = static_cast<int64_t>(i) * block_rows_;
    owner_.assign(static_cast<size_t>(seq.n_rows()), kPrefix);
  }
  void Set(int64_t first, int64_t n, int owner) { std::fill_n(owner_.begin() + first, n, owner); }
  int Of(kv::RowRef r) const {
    const int64_t b = base_[static_cast<size_t>(r.block)];
    if (b < 0) return kPrefix;
    const auto i = static_cast<size_t>(b + r.row);
    return i < owner_.size() ? owner_[i] : kPrefix;
  }

 private:
  int block_rows_;
  std::vector<int64_t> base_;
  std::vector<int> owner_;
};

// Up to k evenly spaced of n items, as indices.
std::vector<int64_t> Spaced(int64_t n, int k) {
  std::vector<int64_t> out;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (int j = 0; j < k; ++j) out.push_back((2 * j + 1) * n / (2 * k));
  return out;
}

// Attention weight on each owner's rows, summed over heads: (n_segments) masses; rows of the
// prefix and the query are skipped.
void AddMass(const engine::TapContext& tap, int t, int n_heads, const RowOwners& owners,
             std::vector<double>* mass) {
  std::vector<float> w;
  std::vector<kv::RowRef> rows;
  for (int h = 0; h < n_heads; ++h) {
    tap.AttentionWeights(t, h, &w, &rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int s = owners.Of(rows[i]);
      if (s >= 0) (*mass)[static_cast<size_t>(s)] += w[i];
    }
  }
}

}  // namespace

const char* RecomputeRuleName(RecomputeRule rule) {
  switch (rule) {
    case RecomputeRule::kNone:
      return "none";
    case RecomputeRule::kMultiHop:
      return "multi_hop";
    case RecomputeRule::kSingleHop:
      return "single_hop";
    case RecomputeRule::kKvDeviation:
      return "kv_deviation";
  }
  return "?";
}

double BlendStats::computed_share() const {
  if (segment_tokens == 0 || computed.empty()) return 0;
  double sum = 0;
  for (int64_t c : computed) sum += static_cast<double>(c);
  return sum / (static_cast<double>(segment_tokens) * static_cast<double>(computed.size()));
}

Result<BlendResult> Blend(const model::Model& model, ThreadPool* pool, const kv::KvSequence& prefix,
                          int64_t prefix_len, std::span<const PlacedSegment> segments,
                          std::span<const int32_t> query, const BlendOptions& options) {
  if (query.empty()) return InvalidArgument("a blend needs at least one query token");
  const auto t_start = Clock::now();
  const model::ModelSpec& spec = model.spec();
  const int n_layers = spec.n_layers;
  const std::vector<kv::RopeSpec> rope = model.rope_specs();
  BlendResult out;
  out.working = std::make_unique<kv::KvSequence>(prefix.pool());
  kv::KvSequence& work = *out.working;
  work.set_window_release(false);
  KVMEM_RETURN_IF_ERROR(AppendPlaced(model, prefix, 0, prefix_len, &work, 0));

  // Segment tokens in placement order: the segment of each, where its stored row is.
  std::vector<int32_t> tokens;
  std::vector<int> segment_of;
  std::vector<int64_t> seg_first, seg_len;
  std::vector<kv::RowRef> src;
  std::vector<const kv::KvPool*> src_pool;
  for (size_t s = 0; s < segments.size(); ++s) {
    const PlacedSegment& p = segments[s];
    const auto n = static_cast<int64_t>(p.tokens.size());
    if (p.first_row < 0 || p.first_row + n > p.cache->n_rows()) {
      return OutOfRange("segment " + std::to_string(s) + " lies outside its cache");
    }
    seg_first.push_back(static_cast<int64_t>(tokens.size()));
    seg_len.push_back(n);
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
    segment_of.insert(segment_of.end(), static_cast<size_t>(n), static_cast<int>(s));
    for (int64_t j = 0; j < n; ++j) {
      src.push_back(kv::RowAt(*p.cache, p.first_row + j));
      src_pool.push_back(p.cache->pool());
    }
  }
  const auto n_seg_tokens = static_cast<int64_t>(tokens.size());
  const auto n_query = static_cast<int64_t>(query.size());
  const int64_t pos = prefix_len + n_seg_tokens;
  out.stats.segment_tokens = n_seg_tokens;
  out.stats.query_tokens = n_query;
  out.stats.computed.assign(static_cast<size_t>(n_layers), 0);
  out.stats.hops.assign(static_cast<size_t>(n_layers), 0);
  out.next_pos = pos + n_query;

  // The segments' rows, placed layer by layer: a row recomputed in a layer is never copied
  // there (kivi4 keys must be written without gaps, so that format gets every row first).
  std::vector<kv::RowRef> dst;
  if (n_seg_tokens > 0) {
    KVMEM_ASSIGN_OR_RETURN(dst, work.AppendRows(static_cast<int>(n_seg_tokens), prefix_len));
  }
  for (int64_t i = 0; i < n_seg_tokens; ++i) work.pool()->set_rotated_pos(dst[i], prefix_len + i);
  std::vector<float> k(spec.k_dim()), v(static_cast<size_t>(spec.n_kv_heads) * spec.head_dim_v);
  double place_ms = 0;
  auto place = [&](int layer, const std::vector<char>* computed) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n_seg_tokens; ++i) {
      if (computed && (*computed)[i]) continue;
      PlaceRow(model, rope[layer], *src_pool[i], src[i], work.pool(), dst[i], layer, prefix_len + i,
               k.data(), v.data());
    }
    place_ms += Ms(t0, Clock::now());
  };
  const bool lazy =
      options.rule != RecomputeRule::kNone && work.pool()->formats().k != kv::KvFormat::kKivi4;
  if (!lazy) {
    for (int l = 0; l < n_layers; ++l) place(l, nullptr);
  }
  auto finish = [&] {
    out.stats.place_ms = place_ms;
    out.stats.total_ms = Ms(t_start, Clock::now());
  };

  if (options.rule == RecomputeRule::kNone || n_seg_tokens == 0) {
    KVMEM_RETURN_IF_ERROR(
        engine::Forward(model, pool, &work, query, pos, false, &out.logits, options.max_batch));
    finish();
    return out;
  }

  // One batch: every segment token over its placed row, then the query over new rows.
  KVMEM_ASSIGN_OR_RETURN(std::vector<kv::RowRef> query_rows,
                         work.AppendRows(static_cast<int>(n_query), pos));
  engine::Batch batch;
  batch.tokens = tokens;
  batch.tokens.insert(batch.tokens.end(), query.begin(), query.end());
  for (int64_t i = 0; i < n_seg_tokens + n_query; ++i) batch.positions.push_back(prefix_len + i);
  batch.rows = dst;
  batch.rows.insert(batch.rows.end(), query_rows.begin(), query_rows.end());

  RowOwners owners(work);
  for (size_t s = 0; s < segments.size(); ++s)
    owners.Set(prefix_len + seg_first[s], seg_len[s], static_cast<int>(s));
  owners.Set(pos, n_query, kQuery);

  const bool by_deviation = options.rule == RecomputeRule::kKvDeviation;
  const std::vector<double> ratios = by_deviation ? FixedRecomputeRatios(n_layers, options.ratio)
                                                  : RecomputeRatios(n_layers, options.ratio);
  // CacheBlend compares layer 0's fresh K/V with the placed rows they overwrite.
  const size_t k_dim = spec.k_dim();
  const size_t v_dim = static_cast<size_t>(spec.n_kv_heads) * spec.head_dim_v;
  std::vector<float> old_k, old_v;
  if (by_deviation) {
    if (lazy) place(0, nullptr);
    old_k.resize(static_cast<size_t>(n_seg_tokens) * k_dim);
    old_v.resize(static_cast<size_t>(n_seg_tokens) * v_dim);
    for (int64_t i = 0; i < n_seg_tokens; ++i)
      work.pool()->ReadToken(dst[i], 0, &old_k[i * k_dim], &old_v[i * v_dim]);
  }

  // cur: the batch indices still computed (ascending; the query's are the last n_query).
  std::vector<int64_t> cur(static_cast<size_t>(n_seg_tokens + n_query));
  for (size_t i = 0; i < cur.size(); ++i) cur[i] = static_cast<int64_t>(i);
  std::vector<char> computed(static_cast<size_t>(n_seg_tokens), 1);  // in the next layer
  std::vector<char> keep_segment(segments.size(), 1);  // whole-segment rules
  std::vector<char> keep_token;                        // CacheBlend
  bool decided = false;
  double importance_ms = 0;

  engine::ForwardPass fp(model, pool);
  fp.set_tap([&](const engine::TapContext& tap) {
    const int l = tap.layer();
    decided = false;
    if (l + 1 >= n_layers) return;
    const auto t0 = Clock::now();
    const auto budget = static_cast<int64_t>(std::llround(ratios[l + 1] * n_seg_tokens));
    if (by_deviation) {
      if (l != 0) return;  // chosen once, after layer 0
      std::vector<double> dev(static_cast<size_t>(n_seg_tokens));
      std::vector<float> kn(k_dim), vn(v_dim);
      for (int64_t i = 0; i < n_seg_tokens; ++i) {
        work.pool()->ReadToken(dst[i], 0, kn.data(), vn.data());
        double d = 0;
        for (size_t j = 0; j < k_dim; ++j) d += std::pow(kn[j] - old_k[i * k_dim + j], 2);
        for (size_t j = 0; j < v_dim; ++j) d += std::pow(vn[j] - old_v[i * v_dim + j], 2);
        dev[i] = d;
      }
      const std::vector<int64_t> ones(static_cast<size_t>(n_seg_tokens), 1);
      keep_token.assign(static_cast<size_t>(n_seg_tokens), 0);
      for (int i : TopByTokens(dev, ones, budget)) keep_token[static_cast<size_t>(i)] = 1;
      decided = true;
      importance_ms += Ms(t0, Clock::now());
      return;
    }
    // Candidates: the segments still computed.
    std::vector<int> cand;
    int64_t cand_tokens = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      if (keep_segment[s]) {
        cand.push_back(static_cast<int>(s));
        cand_tokens += seg_len[s];
      }
    }
    decided = true;
    if (cand_tokens <= budget) return;  // all still fit
    LayerImportance imp;
    const size_t nc = cand.size();
    imp.query.assign(nc, 0);
    imp.cross.assign(nc, std::vector<double>(nc, 0));
    for (int s : cand) imp.tokens.push_back(seg_len[s]);
    // Sources, one per parallel item: the query's tokens, then (multi-hop) each candidate.
    const int first_query = static_cast<int>(cur.size() - n_query);
    const bool cross = options.rule == RecomputeRule::kMultiHop;
    std::unordered_map<int64_t, int> at;  // batch index -> place in cur
    if (cross) {
      for (size_t j = 0; j + n_query < cur.size(); ++j) at[cur[j]] = static_cast<int>(j);
    }
    std::vector<std::vector<double>> query_mass(static_cast<size_t>(n_query));
    const int64_t n_items = n_query + (cross ? static_cast<int64_t>(nc) : 0);
    pool->ParallelFor(n_items, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> mass(segments.size());
      for (int64_t item = begin; item < end; ++item) {
        std::fill(mass.begin(), mass.end(), 0.0);
        if (item < n_query) {
          AddMass(tap, first_query + static_cast<int>(item), spec.n_heads, owners, &mass);
          query_mass[static_cast<size_t>(item)] = mass;
          continue;
        }
        const size_t c = static_cast<size_t>(item - n_query);
        const int s = cand[c];
        const std::vector<int64_t> picks = Spaced(seg_len[s], kSourceTokens);
        for (int64_t p : picks) AddMass(tap, at.at(seg_first[s] + p), spec.n_heads, owners, &mass);
        const double norm = static_cast<double>(picks.size()) * spec.n_heads;
        for (size_t b = 0; b < nc; ++b) {
          if (b != c) imp.cross[c][b] = mass[cand[b]] / (norm * seg_len[cand[b]]);
        }
      }
    });
    const double q_norm = static_cast<double>(n_query) * spec.n_heads;
    for (size_t c = 0; c < nc; ++c) {
      double m = 0;
      for (const auto& qm : query_mass) m += qm[cand[c]];
      imp.query[c] = m / (q_norm * seg_len[cand[c]]);
    }
    int hops = 0;
    const std::vector<int> chosen =
        cross ? MultiHopSelect(imp, budget, kMaxHops, &hops, options.query_source)
              : SingleHopSelect(imp, budget);
    out.stats.hops[static_cast<size_t>(l)] = hops;
    std::fill(keep_segment.begin(), keep_segment.end(), 0);
    for (int c : chosen) keep_segment[cand[c]] = 1;
    importance_ms += Ms(t0, Clock::now());
  });

  KVMEM_RETURN_IF_ERROR(fp.Begin(batch, &work));
  for (int l = 0; l < n_layers; ++l) {
    out.stats.computed[l] = static_cast<int64_t>(cur.size()) - n_query;
    if (lazy && l > 0) place(l, &computed);
    fp.StepLayer();
    if (l + 1 >= n_layers || !decided) continue;
    std::vector<int> keep_at;
    std::vector<int64_t> next;
    for (size_t j = 0; j < cur.size(); ++j) {
      const int64_t b = cur[j];
      const bool keep = b >= n_seg_tokens ||
                        (by_deviation ? keep_token[b] != 0 : keep_segment[segment_of[b]] != 0);
      if (keep) {
        keep_at.push_back(static_cast<int>(j));
        next.push_back(b);
      } else {
        computed[static_cast<size_t>(b)] = 0;
      }
    }
    if (next.size() == cur.size()) continue;
    KVMEM_RETURN_IF_ERROR(fp.KeepTokens(keep_at));
    cur = std::move(next);
  }
  fp.Finish(&out.logits);
  for (size_t s = 0; s < segments.size(); ++s) {
    if (keep_segment[s] && !by_deviation) out.last_layer_segments.push_back(static_cast<int>(s));
  }
  out.stats.importance_ms = importance_ms;
  finish();
  return out;
}

}  // namespace kvmem::memory::segments
