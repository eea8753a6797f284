#include "memory/episodic/block_compression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>

#include "engine/forward.h"
#include "kernels/ops.h"

namespace kvmem::memory {
namespace {

bool WindowLayer(const model::ModelSpec& spec, int l) { return spec.layers[l].sliding_window > 0; }

// Which candidate of a (layer, KV head) list a pool row is: its slot in the cache's region (below
// the list's kept count), then the tail rows; -1 for anything else (a scoring prompt's rows).
class CandidateMap {
 public:
  CandidateMap(const kv::KvSequence& seq, const CompressedCache& cache, int64_t tail_first,
               int64_t tail_end)
      : first_(BlockFirstRows(seq)),
        region_(cache.first_row),
        tail_first_(tail_first),
        tail_end_(tail_end) {}

  int64_t Index(kv::RowRef r, int64_t n_slots) const {
    const int64_t b = first_[r.block];
    if (b < 0) return -1;
    const int64_t s = b + r.row;
    if (s >= region_ && s < region_ + n_slots) return s - region_;
    if (s >= tail_first_ && s < tail_end_) return n_slots + s - tail_first_;
    return -1;
  }

 private:
  std::vector<int64_t> first_;
  int64_t region_, tail_first_, tail_end_;
};

CandidateScores MakeScores(const CompressedCache& c, int64_t n_tail, float init) {
  CandidateScores s;
  s.n_kv_heads = c.n_kv_heads;
  s.of.resize(c.pos.size());
  for (size_t i = 0; i < c.pos.size(); ++i) {
    s.of[i].assign(c.pos[i].size() + static_cast<size_t>(n_tail), init);
  }
  return s;
}

// Eq. 3's s_max: the largest weight the tap's tokens from t0 on (any query head of the KV
// head's group) give each candidate, merged into s. Global layers only.
void MaxAttention(const engine::TapContext& tap, int t0, const model::ModelSpec& spec,
                  const CompressedCache& cache, const CandidateMap& map, ThreadPool* threads,
                  CandidateScores* s) {
  const int l = tap.layer();
  if (WindowLayer(spec, l) || t0 >= tap.n_tokens()) return;
  const int n_kv = spec.n_kv_heads, group = spec.n_heads / spec.n_kv_heads;
  std::mutex mu;
  threads->ParallelFor(tap.n_tokens() - t0, 1, [&](int64_t a, int64_t b) {
    std::vector<std::vector<float>> local(static_cast<size_t>(n_kv));
    for (int g = 0; g < n_kv; ++g) local[g].assign(s->of[l * n_kv + g].size(), 0.0f);
    std::vector<float> w;
    std::vector<kv::RowRef> rows;
    for (int64_t t = t0 + a; t < t0 + b; ++t) {
      for (int h = 0; h < spec.n_heads; ++h) {
        const int g = h / group;
        const auto n_slots = static_cast<int64_t>(cache.of(l, g).size());
        tap.AttentionWeights(static_cast<int>(t), h, &w, &rows);
        for (size_t i = 0; i < rows.size(); ++i) {
          const int64_t c = map.Index(rows[i], n_slots);
          if (c >= 0) local[g][c] = std::max(local[g][c], w[i]);
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int g = 0; g < n_kv; ++g) {
      std::vector<float>& dst = s->of[l * n_kv + g];
      for (size_t i = 0; i < dst.size(); ++i) dst[i] = std::max(dst[i], local[g][i]);
    }
  });
}

// KeyDiff: -cos(k, mean of the candidates' keys) per (layer, KV head).
void KeyDiffScores(const kv::KvSequence& seq, const CompressedCache& cache, int64_t tail_first,
                   const model::ModelSpec& spec, ThreadPool* threads, CandidateScores* s) {
  const kv::KvPool& pool = *seq.pool();
  const kv::KvGeometry& geo = pool.geometry();
  const int n_kv = geo.n_kv_heads, hd = geo.head_dim_k;
  const int64_t n_tail = seq.n_rows() - tail_first;
  threads->ParallelFor(spec.n_layers, 1, [&](int64_t l0, int64_t l1) {
    std::vector<float> k(static_cast<size_t>(n_kv) * hd),
        v(static_cast<size_t>(n_kv) * geo.head_dim_v);
    for (int64_t l = l0; l < l1; ++l) {
      if (WindowLayer(spec, static_cast<int>(l))) continue;
      const int64_t most = cache.layer_rows(static_cast<int>(l));
      // keys[g]: (candidates of (l, g), hd)
      std::vector<std::vector<float>> keys(static_cast<size_t>(n_kv));
      auto take = [&](int g) {
        keys[g].insert(keys[g].end(), k.begin() + static_cast<size_t>(g) * hd,
                       k.begin() + static_cast<size_t>(g + 1) * hd);
      };
      for (int64_t j = 0; j < most; ++j) {
        pool.ReadToken(RowAt(seq, cache.first_row + j), static_cast<int>(l), k.data(), v.data());
        for (int g = 0; g < n_kv; ++g) {
          if (j < static_cast<int64_t>(cache.of(static_cast<int>(l), g).size())) take(g);
        }
      }
      for (int64_t i = 0; i < n_tail; ++i) {
        pool.ReadToken(RowAt(seq, tail_first + i), static_cast<int>(l), k.data(), v.data());
        for (int g = 0; g < n_kv; ++g) take(g);
      }
      for (int g = 0; g < n_kv; ++g) {
        const size_t n = keys[g].size() / hd;
        std::vector<double> mean(static_cast<size_t>(hd), 0.0);
        for (size_t i = 0; i < n; ++i) {
          for (int d = 0; d < hd; ++d) mean[d] += keys[g][i * hd + d];
        }
        double mnorm = 0;
        for (double& m : mean) {
          m /= static_cast<double>(std::max<size_t>(n, 1));
          mnorm += m * m;
        }
        std::vector<float>& dst = s->of[l * n_kv + g];
        for (size_t i = 0; i < n; ++i) {
          double dot = 0, knorm = 0;
          for (int d = 0; d < hd; ++d) {
            dot += keys[g][i * hd + d] * mean[d];
            knorm += static_cast<double>(keys[g][i * hd + d]) * keys[g][i * hd + d];
          }
          const double denom = std::sqrt(knorm * mnorm);
          dst[i] = denom > 0 ? static_cast<float>(-dot / denom) : 0.0f;
        }
      }
    }
  });
}

// Candidate i's position in (l, g)'s list.
int64_t CandidatePos(const kv::KvSequence& seq, const CompressedCache& cache, int l, int g,
                     int64_t tail_first, int64_t i) {
  const std::vector<int64_t>& kept = cache.of(l, g);
  if (i < static_cast<int64_t>(kept.size())) return kept[i];
  return seq.pool()->rotated_pos(RowAt(seq, tail_first + i - static_cast<int64_t>(kept.size())));
}

// Candidates in order of preference: score descending, then the more recent (higher index).
bool Better(float sa, int64_t ia, float sb, int64_t ib) { return sa != sb ? sa > sb : ia > ib; }

// The candidates (l, g) keeps, ascending, for each KV head of layer l.
std::vector<std::vector<int64_t>> Select(const kv::KvSequence& seq, const CompressedCache& cache,
                                         int l, int64_t tail_first, int64_t next_pos,
                                         const CandidateScores& scores,
                                         const CompressionConfig& config,
                                         const model::ModelSpec& spec) {
  const int n_kv = cache.n_kv_heads;
  std::vector<std::vector<int64_t>> keep(static_cast<size_t>(n_kv));
  struct Cand {
    float score;
    int64_t i;
    int g;
  };
  std::vector<Cand> open;  // candidates competing for the budget
  for (int g = 0; g < n_kv; ++g) {
    const std::vector<float>& s = scores.of[static_cast<size_t>(l) * n_kv + g];
    for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
      const int64_t p = CandidatePos(seq, cache, l, g, tail_first, i);
      if (const int w = spec.layers[l].sliding_window; w > 0) {
        if (p > next_pos - w) keep[g].push_back(i);
      } else if (i < config.keep_first) {  // by rank (block_compression.h)
        keep[g].push_back(i);
      } else {
        open.push_back({s[i], i, g});
      }
    }
  }
  if (!WindowLayer(spec, l)) {
    auto order = [](const Cand& a, const Cand& b) {
      if (a.score != b.score || a.i != b.i) return Better(a.score, a.i, b.score, b.i);
      return a.g < b.g;
    };
    std::stable_sort(open.begin(), open.end(), order);
    const int64_t budget = config.layer_rows[l];
    std::vector<int64_t> taken(static_cast<size_t>(n_kv), 0);
    int64_t total = 0;
    for (const Cand& c : open) {
      const bool full =
          config.heads == HeadBudget::kUniform
              ? taken[c.g] >= budget
              : total >= budget * n_kv || static_cast<int64_t>(keep[c.g].size()) >= cache.capacity;
      if (full) continue;
      keep[c.g].push_back(c.i);
      ++taken[c.g];
      ++total;
    }
  }
  for (std::vector<int64_t>& k : keep) std::sort(k.begin(), k.end());
  return keep;
}

}  // namespace

int64_t RegionCapacity(const model::ModelSpec& spec, const CompressionConfig& config) {
  int64_t cap = 0;
  for (int l = 0; l < spec.n_layers; ++l) {
    const int w = spec.layers[l].sliding_window;
    const int64_t per_head = config.heads == HeadBudget::kPair
                                 ? config.layer_rows[l] * spec.n_kv_heads
                                 : config.layer_rows[l];
    cap = std::max(cap, w > 0 ? int64_t{w} : per_head + config.keep_first);
  }
  return cap;
}

Status PrefillOverCache(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                        const CompressedCache& cache, int64_t tail_first,
                        std::span<const int32_t> tokens, int64_t first_pos, int max_batch,
                        std::vector<float>* logits) {
  if (tokens.empty()) return InvalidArgument("no tokens to prefill");
  SetView(cache, seq, tail_first);
  std::vector<float> unused;
  return engine::Forward(model, threads, seq, tokens, first_pos, false,
                         logits != nullptr ? logits : &unused, max_batch);
}

Status CompressTail(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                    CompressedCache* cache, int64_t tail_first, int64_t next_pos,
                    std::span<const int32_t> prompt, const CompressionConfig& config) {
  const model::ModelSpec& spec = model.spec();
  if (static_cast<int>(config.layer_rows.size()) != spec.n_layers) {
    return InvalidArgument("layer budgets: " + std::to_string(config.layer_rows.size()) + " for " +
                           std::to_string(spec.n_layers) + " layers");
  }
  const int64_t n_tail = seq->n_rows() - tail_first;
  CandidateScores scores;
  switch (config.score) {
    case RowScore::kPromptAttention: {
      if (prompt.empty()) return InvalidArgument("prompt attention needs a patched prompt");
      scores = MakeScores(*cache, n_tail, 0.0f);
      SetView(*cache, seq, tail_first);
      const int64_t rows_before = seq->n_rows();
      engine::ForwardPass fp(model, threads);
      const CandidateMap map(*seq, *cache, tail_first, rows_before);
      fp.set_tap([&](const engine::TapContext& tap) {
        MaxAttention(tap, 0, spec, *cache, map, threads, &scores);
      });
      engine::Batch b;
      b.tokens.assign(prompt.begin(), prompt.end());
      for (size_t i = 0; i < prompt.size(); ++i) b.positions.push_back(next_pos + int64_t(i));
      b.persist = false;
      KVMEM_RETURN_IF_ERROR(fp.Begin(b, seq));
      while (!fp.done()) fp.StepLayer();
      seq->Truncate(rows_before);  // the prompt is not kept
      break;
    }
    case RowScore::kKeyDiff:
      scores = MakeScores(*cache, n_tail, 0.0f);
      KeyDiffScores(*seq, *cache, tail_first, spec, threads, &scores);
      break;
    case RowScore::kRecency:
      scores = MakeScores(*cache, n_tail, 0.0f);
      for (int l = 0; l < spec.n_layers; ++l) {
        for (int g = 0; g < cache->n_kv_heads; ++g) {
          std::vector<float>& s = scores.of[static_cast<size_t>(l) * cache->n_kv_heads + g];
          for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
            const int64_t p = CandidatePos(*seq, *cache, l, g, tail_first, i);
            // Sinks by rank (a Replace moves them off positions [0, sinks)); recency by
            // position, whose order Replace keeps.
            s[i] = i < config.sinks ? std::numeric_limits<float>::infinity() : static_cast<float>(p);
          }
        }
      }
      break;
  }
  // Selection first (it reads the old positions), then the rows move in place.
  std::vector<std::vector<std::vector<int64_t>>> keep(static_cast<size_t>(spec.n_layers));
  for (int l = 0; l < spec.n_layers; ++l) {
    keep[l] = Select(*seq, *cache, l, tail_first, next_pos, scores, config, spec);
    for (const std::vector<int64_t>& k : keep[l]) {
      if (static_cast<int64_t>(k.size()) > cache->capacity) {
        return Internal("layer " + std::to_string(l) + " keeps " + std::to_string(k.size()) +
                        " rows; the region holds " + std::to_string(cache->capacity));
      }
    }
  }
  kv::KvPool* pool = seq->pool();
  const kv::KvGeometry& geo = pool->geometry();
  const int n_kv = geo.n_kv_heads, hk = geo.head_dim_k, hv = geo.head_dim_v;
  std::vector<std::vector<int64_t>> new_pos(cache->pos.size());
  // One layer at a time: the pool allows concurrent writes to distinct blocks only.
  {
    std::vector<float> k_in(static_cast<size_t>(n_kv) * hk), v_in(static_cast<size_t>(n_kv) * hv);
    std::vector<float> k_out(k_in.size()), v_out(v_in.size());
    for (int l = 0; l < spec.n_layers; ++l) {
      int64_t rows = 0;
      for (int g = 0; g < n_kv; ++g) {
        rows = std::max<int64_t>(rows, keep[l][g].size());
        std::vector<int64_t>& np = new_pos[static_cast<size_t>(l) * n_kv + g];
        for (int64_t i : keep[l][g]) np.push_back(CandidatePos(*seq, *cache, l, g, tail_first, i));
      }
      // Slot j's sources are candidates >= j, so writing slots in order reads no overwritten row.
      for (int64_t j = 0; j < rows; ++j) {
        kv::RowRef last{-1, -1};
        for (int g = 0; g < n_kv; ++g) {
          float* kd = k_out.data() + static_cast<size_t>(g) * hk;
          float* vd = v_out.data() + static_cast<size_t>(g) * hv;
          if (j >= static_cast<int64_t>(keep[l][g].size())) {
            std::fill(kd, kd + hk, 0.0f);
            std::fill(vd, vd + hv, 0.0f);
            continue;
          }
          const int64_t i = keep[l][g][j];
          const auto n_slots = static_cast<int64_t>(cache->of(l, g).size());
          const kv::RowRef src = i < n_slots ? RowAt(*seq, cache->first_row + i)
                                             : RowAt(*seq, tail_first + i - n_slots);
          if (!(src == last)) {
            pool->ReadToken(src, l, k_in.data(), v_in.data());
            last = src;
          }
          std::copy_n(k_in.data() + static_cast<size_t>(g) * hk, hk, kd);
          std::copy_n(v_in.data() + static_cast<size_t>(g) * hv, hv, vd);
        }
        pool->WriteToken(RowAt(*seq, cache->first_row + j), l, k_out.data(), v_out.data());
      }
    }
  }
  cache->pos = std::move(new_pos);
  cache->next_pos = next_pos;
  return Status::Ok();
}

Status BuildCompressedCache(const model::Model& model, ThreadPool* threads, kv::KvSequence* seq,
                            CompressedCache* cache, std::span<const int32_t> tokens,
                            int64_t first_pos, int64_t block, std::span<const int32_t> prompt,
                            const CompressionConfig& config, int64_t max_pos,
                            const std::function<void(int64_t, int64_t)>& progress) {
  if (block <= 0) return InvalidArgument("the block must hold at least one token");
  if (seq->window_release()) return InvalidArgument("block prefill needs window release off");
  const auto n = static_cast<int64_t>(tokens.size());
  int64_t pos = first_pos;
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t end = std::min(n, begin + block);
    if (pos + (end - begin) > max_pos) {
      std::unique_lock<std::mutex> held;
      if (config.lock != nullptr) held = std::unique_lock<std::mutex>(*config.lock);
      Replace(model, seq, cache);
      pos = cache->next_pos;
    }
    const std::span<const int32_t> part = tokens.subspan(begin, end - begin);
    const int64_t tail_first = seq->n_rows();
    std::unique_lock<std::mutex> held;
    if (config.lock != nullptr) held = std::unique_lock<std::mutex>(*config.lock);
    Status st =
        PrefillOverCache(model, threads, seq, *cache, tail_first, part, pos, config.max_batch);
    pos += end - begin;
    if (st.ok()) {
      const std::span<const int32_t> p =
          config.window_prompt > 0
              ? part.last(std::min<size_t>(part.size(), static_cast<size_t>(config.window_prompt)))
              : prompt;
      st = CompressTail(model, threads, seq, cache, tail_first, pos, p, config);
    }
    seq->Truncate(tail_first);
    seq->view().Clear();
    KVMEM_RETURN_IF_ERROR(st);
    if (progress) progress(end, n);
  }
  return Status::Ok();
}

void Replace(const model::Model& model, kv::KvSequence* seq, CompressedCache* cache) {
  const std::vector<kv::RopeSpec> rope = model.rope_specs();
  kv::KvPool* pool = seq->pool();
  const kv::KvGeometry& geo = pool->geometry();
  const int n_kv = geo.n_kv_heads, hk = geo.head_dim_k;
  std::vector<float> k(static_cast<size_t>(n_kv) * hk),
      v(static_cast<size_t>(n_kv) * geo.head_dim_v);
  const int64_t end = cache->capacity;
  for (int l = 0; l < cache->n_layers; ++l) {
    const kv::RopeSpec& r = rope[l];
    for (int64_t j = 0; j < cache->layer_rows(l); ++j) {
      const kv::RowRef row = RowAt(*seq, cache->first_row + j);
      pool->ReadToken(row, l, k.data(), v.data());
      for (int g = 0; g < n_kv; ++g) {
        const std::vector<int64_t>& pos = cache->of(l, g);
        if (j >= static_cast<int64_t>(pos.size())) continue;
        const int64_t to = end - static_cast<int64_t>(pos.size()) + j;
        kernels::Rope(k.data() + static_cast<size_t>(g) * hk, 1, hk, r.rot_dim, to - pos[j],
                      r.freq_base, r.mode, r.factors(), r.scaling);
      }
      pool->WriteToken(row, l, k.data(), v.data());
    }
  }
  for (std::vector<int64_t>& pos : cache->pos) {
    const int64_t first = end - static_cast<int64_t>(pos.size());
    for (size_t j = 0; j < pos.size(); ++j) pos[j] = first + static_cast<int64_t>(j);
  }
  cache->next_pos = end;
}

}  // namespace kvmem::memory
