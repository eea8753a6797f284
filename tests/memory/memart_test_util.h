// MemArt's tests (memart_test.cpp, memart_whole_turns_test.cpp): a fixture with a tiny random
// model (llama or gemma3, F32 weights, f16 KV), and double-precision references: RoPE by
// directly computed angles, keys read back and un-rotated, layer 0's queries, and the
// blocks' scores of Eq. 2-4 (or the exact max q . k) computed from them directly; and a check
// of what a turn placed in its working rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <span>
#include <vector>

#include "../model/tiny_model.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "kv/kv_pool.h"
#include "memory/retrieval/memart.h"
#include "model/model.h"

namespace kvmem::memory {

// gtest prints a span as [begin, end).
inline void PrintTo(const RowSpan& s, std::ostream* os) {
  *os << "[" << s.begin << ", " << s.end << ")";
}

namespace testing {

class MemArtFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model::testing::TinyConfig c;
    c.arch = GetParam();
    c.sliding_window = 64;
    file_ = std::make_unique<model::testing::TempFile>(model::testing::BuildTinyGguf(c, 7));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(32), 64);
    for (int i = 0; i < 200; ++i) tokens_.push_back((i * 37 + 11 + i * i) % model_->spec().n_vocab);
  }

  std::span<const int32_t> Tokens(int begin, int end) const {
    return std::span(tokens_).subspan(begin, end - begin);
  }

  // Feeds tokens [begin, end) as one remembered turn.
  void Remember(MemArtMemory* mem, int begin, int end) {
    ASSERT_TRUE(mem->BeginTurn(Tokens(begin, end), &threads_, nullptr).ok());
    ASSERT_TRUE(mem->EndTurn(true).ok());
  }

  std::unique_ptr<MemArtMemory> Make(MemArtConfig config) {
    auto mem = MemArtMemory::Create(*model_, pool_.get(), config);
    EXPECT_TRUE(mem.ok()) << mem.status().ToString();
    return mem.ok() ? std::move(*mem) : nullptr;
  }

  std::unique_ptr<model::testing::TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  std::vector<int32_t> tokens_;
};

// Rotates one head's vector x by `delta` positions with RoPE in double precision, the angles
// computed directly.
inline void RotateDirect(std::vector<double>* x, const kv::RopeSpec& rope, int64_t delta) {
  const int half = rope.rot_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double a = delta * std::pow(double(rope.freq_base), -2.0 * i / rope.rot_dim);
    const int i0 = rope.mode == kernels::RopeMode::kNeox ? i : 2 * i;
    const int i1 = rope.mode == kernels::RopeMode::kNeox ? i + half : 2 * i + 1;
    const double x0 = (*x)[i0], x1 = (*x)[i1];
    (*x)[i0] = x0 * std::cos(a) - x1 * std::sin(a);
    (*x)[i1] = x0 * std::sin(a) + x1 * std::cos(a);
  }
}

// The key of a stored row in (layer, head), un-rotated from position pos.
inline std::vector<double> RawKey(const model::Model& model, const kv::KvPool& pool,
                                  kv::RowRef row, int64_t pos, int layer, int head) {
  const model::ModelSpec& s = model.spec();
  std::vector<float> k(s.k_dim()), v(s.v_dim());
  pool.ReadToken(row, layer, k.data(), v.data());
  std::vector<double> x(k.begin() + head * s.head_dim_k, k.begin() + (head + 1) * s.head_dim_k);
  RotateDirect(&x, model.rope_specs()[layer], -pos);
  return x;
}

// History row r of a MemArt memory.
inline kv::RowRef HistoryRow(const MemArtMemory& mem, const kv::KvPool& pool, int64_t r) {
  const int br = pool.geometry().block_rows;
  return {mem.history().blocks()[r / br], static_cast<int32_t>(r % br)};
}

// Layer 0's Q of `tokens` at positions first_pos.. (n_tokens, n_heads, head_dim): it depends only
// on the tokens and their positions, so one layer of a pass over an empty sequence gives it.
inline std::vector<float> Layer0Queries(const model::Model& model, ThreadPool* threads,
                                        kv::KvPool* pool, std::span<const int32_t> tokens,
                                        int64_t first_pos) {
  std::vector<float> q;
  kv::KvSequence scratch(pool);
  engine::Batch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  for (size_t i = 0; i < tokens.size(); ++i) batch.positions.push_back(first_pos + i);
  engine::ForwardPass fp(model, threads);
  fp.set_tap([&](const engine::TapContext& tap) {
    if (tap.layer() == 0) q.assign(tap.q().begin(), tap.q().end());
  });
  if (fp.Begin(batch, &scratch).ok()) fp.StepLayer();
  return q;
}

// Layer 0's score of each of the memory's blocks of `block_size` history rows for queries q (as
// Layer0Queries gives them, at first_pos..): per (token in [t_begin, t_end), head; only `head`
// when >= 0), Eq. 3's bound over the block's box of un-rotated keys (or with kExact the max of
// q . k over its keys), softmax over blocks, summed (softmax-sum).
inline std::vector<double> DirectLayer0Scores(const model::Model& model, const kv::KvPool& pool,
                                              const MemArtMemory& mem, const std::vector<float>& q,
                                              int64_t first_pos, int64_t t_begin, int64_t t_end,
                                              int block_size, BlockScore block_score, int head) {
  const model::ModelSpec& s = model.spec();
  const int group = s.n_heads / s.n_kv_heads;
  const double scale = s.attn_scale();
  const int64_t n_blocks = mem.n_blocks();
  const int64_t n_rows = mem.history_rows();
  std::vector<double> score(n_blocks, 0.0);
  for (int64_t t = t_begin; t < t_end; ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      if (head >= 0 && h != head) continue;
      std::vector<double> qr(s.head_dim_k);
      for (int d = 0; d < s.head_dim_k; ++d) qr[d] = q[(t * s.n_heads + h) * s.head_dim_k + d];
      RotateDirect(&qr, model.rope_specs()[0], -(first_pos + t));  // position-free
      std::vector<double> bound(n_blocks);
      for (int64_t b = 0; b < n_blocks; ++b) {
        std::vector<double> lo(s.head_dim_k, INFINITY), hi(s.head_dim_k, -INFINITY);
        double best = -INFINITY;
        for (int64_t r = b * block_size; r < std::min<int64_t>((b + 1) * block_size, n_rows);
             ++r) {
          const std::vector<double> k = RawKey(model, pool, HistoryRow(mem, pool, r), r, 0,
                                               h / group);
          double dot = 0;
          for (int d = 0; d < s.head_dim_k; ++d) {
            lo[d] = std::min(lo[d], k[d]);
            hi[d] = std::max(hi[d], k[d]);
            dot += qr[d] * k[d];
          }
          best = std::max(best, scale * dot);
        }
        double sum = 0;
        for (int d = 0; d < s.head_dim_k; ++d) sum += std::max(qr[d] * lo[d], qr[d] * hi[d]);
        bound[b] = block_score == BlockScore::kExact ? best : scale * sum;
      }
      const double mx = *std::max_element(bound.begin(), bound.end());
      double z = 0;
      for (double b : bound) z += std::exp(b - mx);
      for (int64_t b = 0; b < n_blocks; ++b) score[b] += std::exp(bound[b] - mx) / z;
    }
  }
  return score;
}

// The open turn's working rows of `layer` hold history `rows` (ascending), in order: values
// unchanged, keys rotated from history position r to working position i (checked against an
// un-rotation by directly computed angles).
inline void ExpectWorkingRows(const model::Model& model, const kv::KvPool& pool,
                              MemArtMemory& mem, int layer, const std::vector<RowSpan>& rows) {
  const model::ModelSpec& s = model.spec();
  const int br = pool.geometry().block_rows;
  int64_t i = 0;
  for (const RowSpan& span : rows) {
    for (int64_t r = span.begin; r < span.end; ++r, ++i) {
      const kv::RowRef hrow = HistoryRow(mem, pool, r);
      const kv::RowRef wrow{mem.working()->blocks()[i / br], static_cast<int32_t>(i % br)};
      std::vector<float> hk(s.k_dim()), hv(s.v_dim()), wk(s.k_dim()), wv(s.v_dim());
      pool.ReadToken(hrow, layer, hk.data(), hv.data());
      pool.ReadToken(wrow, layer, wk.data(), wv.data());
      EXPECT_EQ(hv, wv) << "layer " << layer << " row " << r;
      for (int g = 0; g < s.n_kv_heads; ++g) {
        const std::vector<double> raw = RawKey(model, pool, hrow, r, layer, g);
        const std::vector<double> raw_w = RawKey(model, pool, wrow, i, layer, g);
        for (int d = 0; d < s.head_dim_k; ++d) {
          ASSERT_NEAR(raw_w[d], raw[d], 2e-3 * (1 + std::fabs(raw[d])))
              << "layer " << layer << " row " << r << " -> " << i;
        }
      }
    }
  }
}

}  // namespace testing
}  // namespace kvmem::memory
