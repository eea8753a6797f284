// The prefix cache over a real KvPool but without a model: each row's K holds the token it was
// written for and its position, so a turn can check that every row it reads from the cache is
// the row of that token at that position (not a freed and reused one), while turns of one tenant
// run on several threads, evictions happen under them and turns abort.
#include "memory/prefix/prefix_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

namespace kvmem::memory::prefix {
namespace {

constexpr int kDim = 32;

kv::KvGeometry Geometry() { return {2, 1, kDim, kDim, 256}; }

// Writes rows for tokens[matched..) after the turn's matched prefix, K = (token, position, ...)
// (ids and positions below 2048: exact in f16).
void Prefill(PrefixTurn& turn, std::span<const int32_t> tokens) {
  const int64_t first = turn.next_position();
  const int n = static_cast<int>(tokens.size() - static_cast<size_t>(first));
  auto rows = turn.seq()->AppendRows(n, first);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  kv::KvPool* pool = turn.seq()->pool();
  std::vector<float> k(kDim, 0.0f), v(kDim, 0.0f);
  for (int i = 0; i < n; ++i) {
    k[0] = static_cast<float>(tokens[first + i]);
    k[1] = static_cast<float>(first + i);
    for (int l = 0; l < 2; ++l) pool->WriteToken((*rows)[i], l, k.data(), v.data());
  }
}

// Checks every row the turn's view reads at a position below `upto`: K = (token, position).
void ExpectRowsHold(const PrefixTurn& turn, std::span<const int32_t> tokens, int64_t upto) {
  const kv::KvPool* pool = turn.seq().pool();
  std::vector<float> k(kDim), v(kDim);
  int64_t seen = 0;
  for (const kv::ViewRun& r : turn.seq().view().list(0, 0)) {
    for (int32_t i = 0; i < r.n_rows; ++i) {
      const int64_t pos = r.first_pos + i;
      if (pos >= upto) continue;
      pool->ReadToken({r.block, r.first_row + i}, 1, k.data(), v.data());
      ASSERT_EQ(k[0], static_cast<float>(tokens[pos])) << "position " << pos;
      ASSERT_EQ(k[1], static_cast<float>(pos));
      ++seen;
    }
  }
  EXPECT_EQ(seen, upto);
}

std::vector<int32_t> Prompt(int prefix, int length, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < length; ++i) t.push_back(i < prefix ? 1000 + i : salt * 100 + i);
  return t;
}

size_t BytesPerBlock() {
  kv::KvGeometry g = Geometry();
  g.block_rows = PrefixCache::kBlockRows;
  return kv::KvPool(g, 0, {kv::KvFormat::kF16, kv::KvFormat::kF16}).bytes_per_block();
}

TEST(PrefixCache, ASecondTurnReadsTheFirstTurnsRows) {
  PrefixCache cache(Geometry(), {kv::KvFormat::kF16, kv::KvFormat::kF16}, 64 * BytesPerBlock(), 64);
  const auto p1 = Prompt(70, 90, 1);
  {
    auto t = cache.Begin("t", p1, p1.size() - 1, 100);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ((*t)->matched(), 0);
    Prefill(**t, p1);
    (*t)->Commit(p1);
  }
  EXPECT_EQ(cache.stats().tree.tokens, 90);
  EXPECT_EQ(cache.stats().blocks_held, 3);  // 90 rows in blocks of 32
  EXPECT_EQ(cache.pool()->blocks_in_use(), 3);
  const auto p2 = Prompt(70, 80, 2);
  auto t = cache.Begin("t", p2, p2.size() - 1, 100);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->matched(), 70);
  ExpectRowsHold(**t, p2, 70);
  Prefill(**t, p2);
  ExpectRowsHold(**t, p2, 80);
  // Another tenant sees nothing of it.
  auto other = cache.Begin("u", p1, p1.size() - 1, 100);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->matched(), 0);
  (*t)->Commit(p2);
  EXPECT_EQ(cache.stats().tree.tokens, 100);
  EXPECT_EQ(cache.stats().tree.hit_tokens, 70);
}

TEST(PrefixCache, AbortLeavesTheCacheAsItWas) {
  PrefixCache cache(Geometry(), {kv::KvFormat::kF16, kv::KvFormat::kF16}, 64 * BytesPerBlock(), 64);
  const auto p1 = Prompt(40, 50, 1);
  {
    auto t = cache.Begin("t", p1, p1.size() - 1, 10);
    Prefill(**t, p1);
    (*t)->Commit(p1);
  }
  const PrefixCacheStats before = cache.stats();
  const int blocks = cache.pool()->blocks_in_use();
  {
    const auto p2 = Prompt(40, 120, 2);
    auto t = cache.Begin("t", p2, p2.size() - 1, 10);
    EXPECT_EQ((*t)->matched(), 40);
    Prefill(**t, p2);
    EXPECT_GT(cache.pool()->blocks_in_use(), blocks);
    (*t)->Abort();
  }
  EXPECT_EQ(cache.stats().tree.tokens, before.tree.tokens);
  EXPECT_EQ(cache.stats().blocks_held, before.blocks_held);
  EXPECT_EQ(cache.pool()->blocks_in_use(), blocks);
  EXPECT_EQ(cache.stats().turns, 0);
}

TEST(PrefixCache, DuplicateRowsOfConcurrentTurnsAreFreed) {
  PrefixCache cache(Geometry(), {kv::KvFormat::kF16, kv::KvFormat::kF16}, 64 * BytesPerBlock(), 64);
  const auto p = Prompt(64, 64, 0);
  auto a = cache.Begin("t", p, p.size() - 1, 10);
  auto b = cache.Begin("t", p, p.size() - 1, 10);
  Prefill(**a, p);
  Prefill(**b, p);
  (*a)->Commit(p);
  (*b)->Commit(p);  // everything already present: b's rows are released
  EXPECT_EQ(cache.stats().tree.tokens, 64);
  EXPECT_EQ(cache.stats().blocks_held, 2);
  EXPECT_EQ(cache.pool()->blocks_in_use(), 2);
}

TEST(PrefixCache, EvictionUnderALockedTurnKeepsItsRows) {
  // Room for 4 blocks of cached rows.
  PrefixCache cache(Geometry(), {kv::KvFormat::kF16, kv::KvFormat::kF16}, 4 * BytesPerBlock(), 16);
  const auto shared = Prompt(60, 64, 0);
  {
    auto t = cache.Begin("t", shared, shared.size() - 1, 10);
    Prefill(**t, shared);
    (*t)->Commit(shared);
  }
  const auto mine = Prompt(60, 70, 9);
  auto held = cache.Begin("t", mine, mine.size() - 1, 10);
  ASSERT_EQ((*held)->matched(), 60);
  // Other prompts fill the budget several times over while `held` reads the shared prefix.
  for (int salt = 1; salt <= 6; ++salt) {
    std::vector<int32_t> p;
    for (int i = 0; i < 64; ++i) p.push_back(salt * 1000 + i);
    auto t = cache.Begin("t", p, p.size() - 1, 10);
    Prefill(**t, p);
    (*t)->Commit(p);
  }
  EXPECT_GT(cache.stats().tree.evictions, 0);
  EXPECT_LE(cache.stats().blocks_held, 4 + 2);  // the budget, plus the locked prefix's blocks
  ExpectRowsHold(**held, mine, 60);
  Prefill(**held, mine);
  ExpectRowsHold(**held, mine, 70);
  (*held)->Commit(mine);
  auto again = cache.Begin("t", mine, mine.size() - 1, 10);
  EXPECT_EQ((*again)->matched(), 69);
  ExpectRowsHold(**again, mine, 69);
}

TEST(PrefixCache, ConcurrentTurnsOfOneTenant) {
  PrefixCache cache(Geometry(), {kv::KvFormat::kF16, kv::KvFormat::kF16}, 12 * BytesPerBlock(), 64);
  std::atomic<int> hits{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (int i = 0; i < 60; ++i) {
        // A few shared system prompts, each with a question of its own.
        const int system = static_cast<int>(rng() % 3);
        std::vector<int32_t> p;
        for (int j = 0; j < 40 + system * 7; ++j) p.push_back(system * 500 + j);
        const int question = static_cast<int>(rng() % 40) + 1;
        for (int j = 0; j < question; ++j) p.push_back(static_cast<int32_t>(rng() % 50));
        auto t = cache.Begin("t", p, static_cast<int64_t>(p.size()) - 1, 40);
        ASSERT_TRUE(t.ok()) << t.status().ToString();
        if ((*t)->matched() > 0) ++hits;
        ExpectRowsHold(**t, p, (*t)->matched());
        Prefill(**t, p);
        ExpectRowsHold(**t, p, static_cast<int64_t>(p.size()));
        if (rng() % 5 == 0) {
          (*t)->Abort();
        } else {
          (*t)->Commit(p);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(hits.load(), 0);
  const PrefixCacheStats s = cache.stats();
  EXPECT_EQ(s.turns, 0);
  EXPECT_LE(s.blocks_held, 12);
  // Nothing leaked: the pool's blocks are exactly the cache's.
  EXPECT_EQ(cache.pool()->blocks_in_use(), s.blocks_held);
  cache.Evict(size_t{1} << 40);
  EXPECT_EQ(cache.pool()->blocks_in_use(), 0);
  EXPECT_EQ(cache.stats().tree.tokens, 0);
}

}  // namespace
}  // namespace kvmem::memory::prefix
