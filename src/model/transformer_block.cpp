#include "model/transformer_block.h"

#include <algorithm>
#include <cassert>
#include <cmath>


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
  gate.resize(t * spec.n_ff);
  up.resize(t * spec.n_ff);
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

void ProjectQkv(const ModelSpec& spec, const LayerWeights& w, const float* x,
                std::span<const int64_t> positions, BlockScratch& s, ThreadPool* pool) {
  const int n = s.n_tokens;
  RmsNormRows(x, w.attn_norm, s.xn.data(), n, spec.n_embd, spec.rms_eps);
  kernels::MatMul(w.wq, s.xn.data(), n, s.q.data(), pool);
  kernels::MatMul(w.wk, s.xn.data(), n, s.k.data(), pool);
  kernels::MatMul(w.wv, s.xn.data(), n, s.v.data(), pool);
  AddBias(s.q.data(), w.bq, n);
  AddBias(s.k.data(), w.bk, n);
  AddBias(s.v.data(), w.bv, n);
  const int hd = spec.head_dim_k;
  if (spec.qk_norm) {
    RmsNormRows(s.q.data(), w.q_norm, s.q.data(), n * spec.n_heads, hd, spec.rms_eps);
    RmsNormRows(s.k.data(), w.k_norm, s.k.data(), n * spec.n_kv_heads, hd, spec.rms_eps);
  }
  kernels::RopeCache rope;  // Q and K of a token share one evaluation of the angles
  for (int t = 0; t < n; ++t) {
    kernels::InitRopeCache(positions[t], spec.rope_dim, spec.rope_freq_base, &rope);
    kernels::RopeWithCache(s.q.data() + static_cast<size_t>(t) * spec.q_dim(), spec.n_heads, hd,
                           rope, spec.rope_mode);
    kernels::RopeWithCache(s.k.data() + static_cast<size_t>(t) * spec.k_dim(), spec.n_kv_heads,
                           hd, rope, spec.rope_mode);
  }
}

void StoreKv(const ModelSpec& spec, int layer, const BlockScratch& s,
             std::span<const kv::RowRef> rows, std::span<const int64_t> positions,
             kv::KvPool& kv) {
  for (int t = 0; t < s.n_tokens; ++t) {
    kv.WriteToken(rows[t], layer, s.k.data() + static_cast<size_t>(t) * spec.k_dim(),
                  s.v.data() + static_cast<size_t>(t) * spec.v_dim());
    if (layer == 0) kv.set_rotated_pos(rows[t], positions[t]);
  }
}

void Attend(const ModelSpec& spec, int layer, const kv::KvView& view, const kv::KvPool& kv,
            BlockScratch& s, ThreadPool* pool) {
  const std::vector<kv::ViewRun>& runs = view.layer(layer);
  const int n_kv = spec.n_kv_heads;
  const int group = spec.n_heads / n_kv;
  const int hk = spec.head_dim_k, hv = spec.head_dim_v;
  assert(hk == hv);  // the attention kernels read K and V rows of one head size

  // spans[g]: the runs of KV head g, in view order.
  std::vector<std::vector<kernels::KvSpan>> spans(n_kv);
  int64_t n_view = 0;
  for (const kv::ViewRun& r : runs) n_view += r.n_rows;
  for (int g = 0; g < n_kv; ++g) {
    spans[g].reserve(runs.size());
    for (const kv::ViewRun& r : runs) {
      spans[g].push_back(kv.Span(r.block, layer, g, r.first_row, r.n_rows));
    }
  }
  const int n = s.n_tokens;
  assert(n_view >= n);
  const float scale = spec.attn_scale();
  pool->ParallelFor(static_cast<int64_t>(n) * spec.n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<kernels::KvSpan> visible;
    for (int64_t i = begin; i < end; ++i) {
      const int t = static_cast<int>(i / spec.n_heads);
      const int h = static_cast<int>(i % spec.n_heads);
      const int g = h / group;
      // Causal: token t sees everything but the batch rows after it.
      int64_t limit = n_view - (n - 1 - t);
      visible.clear();
      for (const kernels::KvSpan& sp : spans[g]) {
        if (limit <= 0) break;
        kernels::KvSpan c = sp;
        c.n_rows = std::min<int64_t>(c.n_rows, limit);
        limit -= c.n_rows;
        visible.push_back(c);
      }
      const float* q = s.q.data() + static_cast<size_t>(t) * spec.q_dim() + h * hk;
      float* out = s.attn.data() + (static_cast<size_t>(t) * spec.n_heads + h) * hv;
      kv.Attend(q, visible.data(), static_cast<int>(visible.size()), scale, out);
    }
  });
}

void OutputAndFfn(const ModelSpec& spec, const LayerWeights& w, float* x, BlockScratch& s,
                  ThreadPool* pool) {
  const int n = s.n_tokens;
  const auto& ops = kernels::Ops();
  const size_t nx = static_cast<size_t>(n) * spec.n_embd;
  kernels::MatMul(w.wo, s.attn.data(), n, s.proj.data(), pool);
  for (size_t i = 0; i < nx; ++i) x[i] += s.proj[i];

  RmsNormRows(x, w.ffn_norm, s.xn.data(), n, spec.n_embd, spec.rms_eps);
  kernels::MatMul(w.w_gate, s.xn.data(), n, s.gate.data(), pool);
  kernels::MatMul(w.w_up, s.xn.data(), n, s.up.data(), pool);
  ops.swiglu(s.gate.data(), s.up.data(), s.gate.data(), static_cast<int64_t>(n) * spec.n_ff);
  kernels::MatMul(w.w_down, s.gate.data(), n, s.proj.data(), pool);
  for (size_t i = 0; i < nx; ++i) x[i] += s.proj[i];
}

}  // namespace kvmem::model
