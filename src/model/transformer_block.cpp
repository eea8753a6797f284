#include "model/transformer_block.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <limits>

namespace kvmem::model {

void BlockScratch::Resize(const ModelSpec& spec, int n) {
  n_tokens = n;
  const size_t t = static_cast<size_t>(n);
  xn.resize(t * spec.n_embd);
  q.resize(t * spec.q_dim());
  k.resize(t * spec.k_dim());
  v.resize(t * spec.v_dim());
  attn.resize(t * spec.n_heads * spec.head_dim_v);
  proj.resize(t * spec.n_embd);
  const size_t n_ff = spec.n_expert > 0 ? 0 : spec.n_ff;  // the MoE FFN has its own buffers
  gate.resize(t * n_ff);
  up.resize(t * n_ff);
}

namespace {

void RmsNormRows(const float* x, const std::vector<float>& w, float* y, int n_rows, int n,
                 float eps) {
  const auto& ops = kernels::Ops();
  for (int r = 0; r < n_rows; ++r) {
    ops.rms_norm(x + static_cast<size_t>(r) * n, w.data(), y + static_cast<size_t>(r) * n, n, eps);
  }
}

void AddBias(float* y, const std::vector<float>& b, int n_rows) {
  if (b.empty()) return;
  const size_t n = b.size();
  for (int r = 0; r < n_rows; ++r) {
    for (size_t i = 0; i < n; ++i) y[r * n + i] += b[i];
  }
}

}  // namespace

void ProjectQkv(const ModelSpec& spec, int layer, const LayerWeights& w, const float* x,
                std::span<const int64_t> positions, BlockScratch& s, ThreadPool* pool) {
  const int n = s.n_tokens;
  RmsNormRows(x, w.attn_norm, s.xn.data(), n, spec.n_embd, spec.rms_eps);
  const kernels::MatMulOut qkv[] = {{&w.wq, s.q.data()}, {&w.wk, s.k.data()}, {&w.wv, s.v.data()}};
  kernels::MatMuls(qkv, s.xn.data(), n, pool);
  AddBias(s.q.data(), w.bq, n);
  AddBias(s.k.data(), w.bk, n);
  AddBias(s.v.data(), w.bv, n);
  const int hd = spec.head_dim_k;
  if (spec.qk_norm) {
    RmsNormRows(s.q.data(), w.q_norm, s.q.data(), n * spec.n_heads, hd, spec.rms_eps);
    RmsNormRows(s.k.data(), w.k_norm, s.k.data(), n * spec.n_kv_heads, hd, spec.rms_eps);
  }
  const LayerSpec& ls = spec.layers[layer];
  kernels::RopeCache rope;  // Q and K of a token share one evaluation of the angles
  for (int t = 0; t < n; ++t) {
    kernels::InitRopeCache(positions[t], spec.rope_dim, ls.rope_freq_base, &rope,
                           spec.rope_freq_factors.empty() ? nullptr : spec.rope_freq_factors.data(),
                           ls.rope_scaling, ls.rope_magnitude);
    kernels::RopeWithCache(s.q.data() + static_cast<size_t>(t) * spec.q_dim(), spec.n_heads, hd,
                           rope, spec.rope_mode);
    kernels::RopeWithCache(s.k.data() + static_cast<size_t>(t) * spec.k_dim(), spec.n_kv_heads, hd,
                           rope, spec.rope_mode);
  }
}

void StoreKv(const ModelSpec& spec, int layer, const BlockScratch& s,
             std::span<const kv::RowRef> rows, std::span<const int64_t> positions, kv::KvPool& kv,
             int first_token) {
  assert(static_cast<size_t>(first_token) + rows.size() <= static_cast<size_t>(s.n_tokens));
  for (size_t t = 0; t < rows.size(); ++t) {
    const size_t i = static_cast<size_t>(first_token) + t;
    kv.WriteToken(rows[t], layer, s.k.data() + i * spec.k_dim(), s.v.data() + i * spec.v_dim());
    if (layer == 0) kv.set_rotated_pos(rows[t], positions[t]);
  }
}

namespace {

// Appends the parts of rows [lo, lo + n) of `block` that lie in `allowed` (sorted).
template <typename Emit>
void Intersect(int32_t block, int32_t lo, int32_t n, const std::vector<RowRange>& allowed,
               Emit emit) {
  const int32_t hi = lo + n;
  for (const RowRange& a : allowed) {
    if (a.block != block) continue;
    const int32_t c_lo = std::max(lo, a.first_row);
    const int32_t c_hi = std::min(hi, a.first_row + a.n_rows);
    if (c_lo < c_hi) emit(c_lo, c_hi - c_lo);
  }
}

}  // namespace

void CollectVisible(const kv::KvView& view, const kv::KvPool& kv, int layer, int head, int window,
                    const Visibility& vis, int t, std::vector<kernels::KvSpan>* spans,
                    std::vector<RowRange>* ranges) {
  spans->clear();
  if (ranges) ranges->clear();
  const int64_t pos = vis.positions[t];
  auto emit = [&](int32_t block, int32_t first, int32_t n) {
    spans->push_back(kv.Span(block, layer, head, first, n));
    if (ranges) ranges->push_back({block, first, n});
  };
  for (const kv::ViewRun& r : view.list(layer, head)) {
    if (r.dead()) continue;
    // Positions rise by one along a run, so the rows in reach are one contiguous part of it.
    const int64_t end = std::min<int64_t>(r.n_rows, pos - r.first_pos + 1);
    // In a sliding-window layer, rows at positions <= pos - window are out of reach.
    const int64_t begin = window > 0 ? std::max<int64_t>(0, pos - window + 1 - r.first_pos) : 0;
    if (end <= begin) continue;
    const auto first = static_cast<int32_t>(r.first_row + begin);
    const auto n_vis = static_cast<int32_t>(end - begin);
    if (vis.allowed.empty()) {
      emit(r.block, first, n_vis);
    } else {
      Intersect(r.block, first, n_vis, vis.allowed[t],
                [&](int32_t f, int32_t n) { emit(r.block, f, n); });
    }
  }
}

namespace {

// Rows [r0, r1) of the rows the spans list, in order (per-row K/V formats).
void SliceSpans(const std::vector<kernels::KvSpan>& spans, int64_t r0, int64_t r1,
                std::vector<kernels::KvSpan>* out) {
  out->clear();
  int64_t base = 0;
  for (const kernels::KvSpan& sp : spans) {
    const int64_t lo = std::max(r0, base), hi = std::min(r1, base + sp.n_rows);
    if (lo < hi) {
      kernels::KvSpan s = sp;
      s.k += (lo - base) * sp.k_stride;
      s.v += (lo - base) * sp.v_stride;
      s.n_rows = hi - lo;
      out->push_back(s);
    }
    base += sp.n_rows;
  }
}

// The unnormalized attention state of one (token, KV head) over one chunk of its rows, in
// `stride` = group * (head_dim + 2) floats of scratch: acc (group, head_dim), m (group), l (group).
struct Partial {
  float* acc;
  float* m;
  float* l;
  Partial(float* base, int group, int head_dim)
      : acc(base),
        m(base + static_cast<size_t>(group) * head_dim),
        l(base + static_cast<size_t>(group) * (head_dim + 1)) {}
};

// Rows per chunk of a (token, KV head) with `rows` visible rows: 8 chunks of equal length
// (rounded up to 16 rows, at least 256), so that the chunks of the KV heads of a decode step
// split evenly over the threads (flash-decoding); long chunks cost fewer calls and merges, and
// the kernel prefetches across its tiles within a call (measured 11% faster decode at depth
// 8192 than 256-row chunks; 8 equal chunks rather than 1024-row ones and a short ninth: +1.7%).
// A function of the rows only, so that results depend neither on threads nor on the batch.
int64_t ChunkRows(int64_t rows) {
  constexpr int64_t kChunks = 8, kAlign = 16, kMinRows = 256;
  const int64_t per_chunk = (rows + kChunks - 1) / kChunks;
  return std::max(kMinRows, (per_chunk + kAlign - 1) / kAlign * kAlign);
}

// Attention with the query heads of a KV head computed together (each K/V row converted once),
// over fixed chunks of ChunkRows visible rows merged in order, so that the result depends
// neither on the batch nor on the thread count. Decode-sized batches spread the chunks of a
// (token, KV head) over the threads (flash-decoding); larger batches give each thread whole
// (token, KV head) pairs.
void AttendGrouped(const ModelSpec& spec, int layer, std::span<const AttendPiece> pieces,
                   std::span<const float> sinks, BlockScratch& s, ThreadPool* pool) {
  const int group = spec.n_heads / spec.n_kv_heads;
  const int hd = spec.head_dim_k;
  const float scale = spec.attn_scale();
  const int window = spec.layers[layer].sliding_window;
  // Pairs (token, KV head) of every piece, piece by piece, token-major.
  std::vector<int> pair_piece;
  std::vector<int64_t> pair_token;  // the token's row in the scratch
  for (size_t j = 0; j < pieces.size(); ++j) {
    for (size_t t = 0; t < pieces[j].vis.positions.size(); ++t) {
      for (int g = 0; g < spec.n_kv_heads; ++g) {
        pair_piece.push_back(static_cast<int>(j));
        pair_token.push_back(pieces[j].first_token + static_cast<int64_t>(t));
      }
    }
  }
  const auto n_pairs = static_cast<int64_t>(pair_piece.size());
  std::vector<std::vector<kernels::KvSpan>> spans(n_pairs);
  std::vector<int64_t> first_chunk(n_pairs + 1, 0), chunk_rows(n_pairs);
  for (int64_t p = 0; p < n_pairs; ++p) {
    const AttendPiece& piece = pieces[pair_piece[p]];
    CollectVisible(*piece.view, *piece.kv, layer, static_cast<int>(p % spec.n_kv_heads), window,
                   piece.vis, static_cast<int>(pair_token[p] - piece.first_token), &spans[p],
                   nullptr);
    int64_t rows = 0;
    for (const kernels::KvSpan& sp : spans[p]) rows += sp.n_rows;
    chunk_rows[p] = ChunkRows(rows);
    first_chunk[p + 1] =
        first_chunk[p] + std::max<int64_t>(1, (rows + chunk_rows[p] - 1) / chunk_rows[p]);
  }
  auto q_of = [&](int64_t p) {
    return s.q.data() + static_cast<size_t>(pair_token[p]) * spec.q_dim() +
           static_cast<size_t>(p % spec.n_kv_heads) * group * hd;
  };
  auto out_of = [&](int64_t p) {
    return s.attn.data() + (static_cast<size_t>(pair_token[p]) * spec.n_heads +
                            static_cast<size_t>(p % spec.n_kv_heads) * group) * hd;
  };
  const size_t stride = static_cast<size_t>(group) * (hd + 2);
  auto chunk = [&](int64_t p, int64_t c, std::vector<kernels::KvSpan>* slice, Partial out) {
    SliceSpans(spans[p], c * chunk_rows[p], (c + 1) * chunk_rows[p], slice);
    pieces[pair_piece[p]].kv->AttendPartial(q_of(p), group, slice->data(),
                                            static_cast<int>(slice->size()), scale, out.acc, out.m,
                                            out.l);
  };
  // Merges chunks 1.. of pair p (next_partial(c)) into chunk 0's state `first`, in order.
  auto merge_and_finish = [&](int64_t p, Partial first, auto next_partial) {
    for (int64_t c = 1; c < first_chunk[p + 1] - first_chunk[p]; ++c) {
      const Partial b = next_partial(c);
      kernels::MergeAttendPartial(group, hd, first.acc, first.m, first.l, b.acc, b.m, b.l);
    }
    const float* sink = sinks.empty() ? nullptr : sinks.data() + (p % spec.n_kv_heads) * group;
    kernels::FinishAttendPartial(group, hd, first.acc, first.m, first.l, sink, out_of(p));
  };

  const int64_t n_chunks = first_chunk[n_pairs];
  if (n_pairs >= 4 * pool->size() || n_chunks == n_pairs) {
    pool->ParallelFor(n_pairs, 1, [&](int64_t begin, int64_t end) {
      std::vector<kernels::KvSpan> slice;
      std::vector<float> scratch(2 * stride);
      const Partial acc(scratch.data(), group, hd), next(scratch.data() + stride, group, hd);
      for (int64_t p = begin; p < end; ++p) {
        chunk(p, 0, &slice, acc);
        merge_and_finish(p, acc, [&](int64_t c) {
          chunk(p, c, &slice, next);
          return next;
        });
      }
    });
    return;
  }
  // Decode: the chunks of all pairs are spread over the threads; whichever thread completes a
  // pair's last chunk merges that pair's partials in chunk order (so the result does not depend
  // on which thread ran what, and no second pass over the pairs is needed).
  s.partials.resize(static_cast<size_t>(n_chunks) * stride);
  auto partial_at = [&](int64_t i) {
    return Partial(s.partials.data() + static_cast<size_t>(i) * stride, group, hd);
  };
  std::vector<std::atomic<int>> chunks_left(n_pairs);
  std::vector<int64_t> pair_of(n_chunks);
  for (int64_t p = 0; p < n_pairs; ++p) {
    chunks_left[p].store(static_cast<int>(first_chunk[p + 1] - first_chunk[p]));
    for (int64_t i = first_chunk[p]; i < first_chunk[p + 1]; ++i) pair_of[i] = p;
  }
  pool->ParallelFor(n_chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<kernels::KvSpan> slice;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t p = pair_of[i];
      chunk(p, i - first_chunk[p], &slice, partial_at(i));
      if (chunks_left[p].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        merge_and_finish(p, partial_at(first_chunk[p]),
                         [&](int64_t c) { return partial_at(first_chunk[p] + c); });
      }
    }
  });
}

}  // namespace

void Attend(const ModelSpec& spec, int layer, const kv::KvView& view, const kv::KvPool& kv,
            const Visibility& vis, std::span<const float> sinks, BlockScratch& s,
            ThreadPool* pool, int first_token) {
  const int group = spec.n_heads / spec.n_kv_heads;
  const int hk = spec.head_dim_k, hv = spec.head_dim_v;
  assert(hk == hv);  // the attention kernels read K and V rows of one head size
  const float scale = spec.attn_scale();
  const int window = spec.layers[layer].sliding_window;
  const int n = static_cast<int>(vis.positions.size());
  assert(first_token + n <= s.n_tokens);
  if (kv.AttendPartialSupported() && spec.n_heads % spec.n_kv_heads == 0) {
    const AttendPiece piece{&view, &kv, vis, first_token};
    return AttendGrouped(spec, layer, {&piece, 1}, sinks, s, pool);
  }
  // One task per (token, head) for balance at decode (few heads, two threads); collecting the
  // spans again per head is O(runs), small next to reading the rows.
  pool->ParallelFor(static_cast<int64_t>(n) * spec.n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<kernels::KvSpan> spans;
    for (int64_t i = begin; i < end; ++i) {
      const int t = static_cast<int>(i / spec.n_heads);
      const int h = static_cast<int>(i % spec.n_heads);
      CollectVisible(view, kv, layer, h / group, window, vis, t, &spans, nullptr);
      const size_t row = static_cast<size_t>(first_token) + t;
      const float* q = s.q.data() + row * spec.q_dim() + h * hk;
      float* out = s.attn.data() + (row * spec.n_heads + h) * hv;
      kv.Attend(q, spans.data(), static_cast<int>(spans.size()), scale, out,
                sinks.empty() ? -std::numeric_limits<float>::infinity() : sinks[h]);
    }
  });
}

void AttendMany(const ModelSpec& spec, int layer, std::span<const AttendPiece> pieces,
                std::span<const float> sinks, BlockScratch& s, ThreadPool* pool) {
  const bool grouped =
      spec.n_heads % spec.n_kv_heads == 0 &&
      std::all_of(pieces.begin(), pieces.end(),
                  [](const AttendPiece& p) { return p.kv->AttendPartialSupported(); });
  if (grouped) return AttendGrouped(spec, layer, pieces, sinks, s, pool);
  for (const AttendPiece& p : pieces) {
    Attend(spec, layer, *p.view, *p.kv, p.vis, sinks, s, pool, p.first_token);
  }
}

void OutputAndFfn(const ModelSpec& spec, const LayerWeights& w, float* x, BlockScratch& s,
                  ThreadPool* pool) {
  const int n = s.n_tokens;
  const auto& ops = kernels::Ops();
  const size_t nx = static_cast<size_t>(n) * spec.n_embd;
  kernels::MatMul(w.wo, s.attn.data(), n, s.proj.data(), pool);
  AddBias(s.proj.data(), w.bo, n);
  if (spec.post_norms) {
    RmsNormRows(s.proj.data(), w.attn_post_norm, s.proj.data(), n, spec.n_embd, spec.rms_eps);
  }
  for (size_t i = 0; i < nx; ++i) x[i] += s.proj[i];

  RmsNormRows(x, w.ffn_norm, s.xn.data(), n, spec.n_embd, spec.rms_eps);
  if (spec.n_expert > 0) {
    MoeFfn(spec, w, s.xn.data(), n, s.proj.data(), s.moe, pool);
  } else {
    const kernels::MatMulOut gate_up[] = {{&w.w_gate, s.gate.data()}, {&w.w_up, s.up.data()}};
    kernels::MatMuls(gate_up, s.xn.data(), n, pool);
    const int64_t n_ff = static_cast<int64_t>(n) * spec.n_ff;
    const auto glu = spec.ffn_act == FfnActivation::kGeluTanh ? ops.geglu : ops.swiglu;
    glu(s.gate.data(), s.up.data(), s.gate.data(), n_ff);
    kernels::MatMul(w.w_down, s.gate.data(), n, s.proj.data(), pool);
  }
  if (spec.post_norms) {
    RmsNormRows(s.proj.data(), w.ffn_post_norm, s.proj.data(), n, spec.n_embd, spec.rms_eps);
  }
  for (size_t i = 0; i < nx; ++i) x[i] += s.proj[i];
}

}  // namespace kvmem::model
