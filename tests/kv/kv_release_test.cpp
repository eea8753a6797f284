// Per-layer storage of KvPool blocks: a layer's raw bytes copied into another pool read back as
// the same rows (the persistence path), released layers give their memory back and it is
// reused, KvSequence::ReleaseLayerThrough releases exactly the whole blocks out of reach, and
// pools sharing LayerChunks hand their memory on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_format.h"
#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "kv/layer_chunks.h"

namespace kvmem::kv {
namespace {

constexpr KvFormat kAllFormats[] = {KvFormat::kF16, KvFormat::kQ8_0, KvFormat::kQ4_0,
                                    KvFormat::kKivi4};

KvGeometry Geometry() { return {/*n_layers=*/3, /*n_kv_heads=*/2, 64, 64, /*block_rows=*/64}; }

// Writes n rows of random K/V into every layer of `block`.
void Fill(KvPool* pool, int32_t block, int n, std::mt19937* rng) {
  const KvGeometry& g = pool->geometry();
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  for (int r = 0; r < n; ++r) {
    for (int l = 0; l < g.n_layers; ++l) {
      for (float& x : k) x = dist(*rng);
      for (float& x : v) x = dist(*rng);
      pool->WriteToken({block, r}, l, k.data(), v.data());
    }
    pool->set_rotated_pos({block, r}, 100 + r);
  }
}

std::vector<float> Read(const KvPool& pool, RowRef r, int layer) {
  const KvGeometry& g = pool.geometry();
  std::vector<float> kv(g.n_kv_heads * (g.head_dim_k + g.head_dim_v));
  pool.ReadToken(r, layer, kv.data(), kv.data() + g.n_kv_heads * g.head_dim_k);
  return kv;
}

// 64 rows = two whole kivi groups; 45 rows = one group + 13 staged rows.
TEST(KvPoolRawLayer, CopyIntoAnotherPoolReadsTheSameRows) {
  for (KvFormat f : kAllFormats) {
    for (int n : {64, 45, 1}) {
      std::mt19937 rng(n);
      KvPool src(Geometry(), 2, {f, f}), dst(Geometry(), 2, {f, f});
      const int32_t a = *src.Allocate(), b = *dst.Allocate();
      Fill(&src, a, n, &rng);
      for (int l = 0; l < 3; ++l) {
        const KvPool::RawLayer raw = src.raw_layer(a, l);
        EXPECT_EQ(raw.data.size(), src.layer_bytes());
        const bool staged = f == KvFormat::kKivi4 && n % 32 != 0;
        EXPECT_EQ(raw.staging.empty(), !staged) << KvFormatName(f) << " " << n;
        ASSERT_TRUE(dst.LoadLayer(b, l, raw.data, raw.staging, n).ok());
        EXPECT_EQ(dst.written_rows(b, l), n);
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(Read(src, {a, r}, l), Read(dst, {b, r}, l))
              << KvFormatName(f) << " n=" << n << " layer " << l << " row " << r;
        }
      }
      // Loaded rows keep growing like written ones (kivi4: the staged group completes).
      std::mt19937 rng2(7);
      if (n < 64) Fill(&dst, b, 64, &rng2);
    }
  }
}

TEST(KvPoolRawLayer, LoadRejectsWrongSizes) {
  KvPool pool(Geometry(), 1, {KvFormat::kKivi4, KvFormat::kQ8_0});
  const int32_t b = *pool.Allocate();
  std::vector<uint8_t> data(pool.layer_bytes());
  std::vector<uint16_t> staging(2 * 32 * 64);
  EXPECT_EQ(pool.LoadLayer(b, 0, std::span(data).first(10), {}, 32).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.LoadLayer(b, 0, data, {}, 65).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.LoadLayer(b, 0, data, {}, 40).code(), ErrorCode::kInvalidArgument);  // staging
  EXPECT_EQ(pool.LoadLayer(b, 0, data, staging, 32).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(pool.LoadLayer(b, 0, data, staging, 40).ok());
  EXPECT_TRUE(pool.LoadLayer(b, 1, data, {}, 64).ok());
}

TEST(KvPoolRelease, LayerMemoryIsGivenBackAndReused) {
  KvPool pool(Geometry(), 4);
  const size_t layer = pool.layer_bytes();
  const int32_t a = *pool.Allocate();
  EXPECT_EQ(pool.bytes_in_use(), 3 * layer);
  pool.ReleaseLayer(a, 1);
  pool.ReleaseLayer(a, 1);  // idempotent
  EXPECT_FALSE(pool.has_layer(a, 1));
  EXPECT_FALSE(pool.has_all_layers(a));
  EXPECT_TRUE(pool.raw_layer(a, 1).data.empty());
  EXPECT_EQ(pool.bytes_in_use(), 2 * layer);
  // The released layer's memory serves the next block: the peak does not grow.
  const int32_t b = *pool.Allocate();
  EXPECT_EQ(pool.bytes_in_use(), 5 * layer);
  EXPECT_EQ(pool.peak_bytes_in_use(), 5 * layer);
  pool.Free(a);
  EXPECT_EQ(pool.bytes_in_use(), 3 * layer);
  // A freed block comes back whole.
  const int32_t c = *pool.Allocate();
  EXPECT_TRUE(pool.has_all_layers(c));
  EXPECT_TRUE(pool.has_all_layers(b));
  EXPECT_EQ(pool.peak_bytes_in_use(), 6 * layer);
}

TEST(KvSequenceRelease, ReleasesOnlyWholeBlocksOutOfReach) {
  KvPool pool({3, 1, 32, 32, /*block_rows=*/4}, 16);
  KvSequence seq(&pool);
  auto rows = seq.AppendRows(14, 0);  // blocks: 0..3, 4..7, 8..11, 12..13
  ASSERT_TRUE(rows.ok());
  std::vector<float> k(32, 1.0f), v(32, 1.0f);
  for (const RowRef& r : *rows) {
    for (int l = 0; l < 3; ++l) pool.WriteToken(r, l, k.data(), v.data());
  }
  for (int i = 0; i < 14; ++i) pool.set_rotated_pos((*rows)[i], i);
  // Rows at positions <= 6 are out of reach in layer 1: only block 0 lies entirely there.
  EXPECT_EQ(seq.ReleaseLayerThrough(1, 6), pool.layer_bytes());
  EXPECT_EQ(seq.released_through(1), 3);
  EXPECT_EQ(seq.released_through(0), kNoPosition);
  EXPECT_FALSE(pool.has_layer(seq.blocks()[0], 1));
  EXPECT_TRUE(pool.has_layer(seq.blocks()[0], 0));
  EXPECT_EQ(seq.view().n_rows(1), 10);  // the released rows left layer 1's view only
  EXPECT_EQ(seq.view().n_rows(0), 14);
  // The partial last block is never released, even when all its rows are out of reach.
  EXPECT_EQ(seq.ReleaseLayerThrough(1, 100), 2 * pool.layer_bytes());
  EXPECT_TRUE(pool.has_layer(seq.blocks()[3], 1));
  EXPECT_EQ(seq.released_through(1), 11);
  // Truncating into released blocks keeps the record: rows written there later would lack
  // layer 1, which the forward pass refuses (tests/engine/gemma3_window_test.cpp).
  seq.Truncate(6);
  EXPECT_EQ(seq.released_through(1), 11);
  EXPECT_FALSE(pool.has_all_layers(seq.blocks()[1]));
  auto more = seq.AppendRows(8, 6);  // fills block 1, then a fresh whole block
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(pool.has_all_layers(more->back().block));
  // Cleared, the sequence starts over: nothing released any more.
  seq.Clear();
  EXPECT_EQ(seq.released_through(1), kNoPosition);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

// Pools sharing LayerChunks hand their layer memory on: a pool destroyed gives it back, the next
// pool's blocks reuse exactly those chunks, and the cache keeps no more than its cap.
TEST(LayerChunks, PoolsHandMemoryOn) {
  const KvGeometry g = Geometry();
  const size_t layer = KvPool(g, 0).layer_bytes();
  LayerChunks chunks(layer, 4 * layer);
  chunks.Reserve(2 * layer);
  EXPECT_EQ(chunks.cached_bytes(), 2 * layer);
  std::vector<const uint8_t*> seen;
  {
    KvPool a(g, 2, {}, &chunks);
    const int32_t b = *a.Allocate();  // 3 layers: 2 cached chunks + 1 new
    EXPECT_EQ(chunks.cached_bytes(), 0u);
    for (int l = 0; l < 3; ++l) seen.push_back(a.raw_layer(b, l).data.data());
    a.ReleaseLayer(b, 0);  // stays with the pool until it is destroyed
    EXPECT_EQ(chunks.cached_bytes(), 0u);
  }
  EXPECT_EQ(chunks.cached_bytes(), 3 * layer);
  KvPool c(g, 2, {}, &chunks);
  const int32_t b = *c.Allocate();
  for (int l = 0; l < 3; ++l) {
    EXPECT_NE(std::find(seen.begin(), seen.end(), c.raw_layer(b, l).data.data()), seen.end());
  }
  // The cap: 6 chunks come back, 4 are kept.
  {
    KvPool d(g, 2, {}, &chunks);
    (void)*d.Allocate();
    (void)*d.Allocate();
  }
  EXPECT_EQ(chunks.cached_bytes(), 4 * layer);
}

}  // namespace
}  // namespace kvmem::kv
