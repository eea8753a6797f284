// The radix tree without a model: rows are plain (block, row) names given out by a simulated
// pool that checks every row comes back exactly once. Expected matches are worked out by hand.
#include "memory/prefix/radix_tree.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>
#include <vector>

namespace kvmem::memory::prefix {
namespace {

// Hands out distinct rows and records what the tree gives back.
class SimPool : public RowOwner {
 public:
  std::vector<kv::RowRef> Rows(size_t n) {
    std::vector<kv::RowRef> out;
    for (size_t i = 0; i < n; ++i) {
      out.push_back({next_ / 4, next_ % 4});
      live_.insert({next_ / 4, next_ % 4});
      ++next_;
    }
    return out;
  }
  void Release(std::span<const kv::RowRef> rows) override {
    for (const kv::RowRef& r : rows) {
      ASSERT_EQ(live_.erase({r.block, r.row}), 1u) << "row released twice or never given";
      released_.push_back(r);
    }
  }
  // The caller's own duplicates (Insert's returned prefix).
  void Drop(std::span<const kv::RowRef> rows) {
    for (const kv::RowRef& r : rows) live_.erase({r.block, r.row});
  }
  size_t live() const { return live_.size(); }
  std::vector<kv::RowRef> released_;

 private:
  int32_t next_ = 0;
  std::set<std::pair<int32_t, int32_t>> live_;
};

using Tokens = std::vector<int32_t>;

TEST(RadixTree, InsertReturnsWhatWasPresentAndMatchReturnsTheTreesRows) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  const Tokens a = {1, 2, 3, 4};
  const auto ra = pool.Rows(4);
  EXPECT_EQ(tree.Insert("t", a, ra), 0);
  const Tokens b = {1, 2, 3, 4, 5, 6};
  const auto rb = pool.Rows(6);
  EXPECT_EQ(tree.Insert("t", b, rb), 4);
  pool.Drop(std::span(rb).first(4));  // the caller's duplicates
  const Tokens q = {1, 2, 3, 4, 5, 6, 7};
  const PrefixMatch m = tree.MatchPrefix("t", q);
  EXPECT_EQ(m.length, 6);
  std::vector<kv::RowRef> want(ra.begin(), ra.end());
  want.push_back(rb[4]);
  want.push_back(rb[5]);
  EXPECT_EQ(m.rows, want);
  EXPECT_EQ(tree.stats().tokens, 6);
  // Inserting a prefix of what is there adds nothing.
  const auto rc = pool.Rows(3);
  EXPECT_EQ(tree.Insert("t", Tokens{1, 2, 3}, rc), 3);
  pool.Drop(rc);
  EXPECT_EQ(tree.stats().tokens, 6);
}

TEST(RadixTree, AMatchEndingMidEdgeSplitsTheNode) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  const auto r = pool.Rows(5);
  tree.Insert("t", Tokens{1, 2, 3, 4, 5}, r);
  EXPECT_EQ(tree.stats().nodes, 1);
  const PrefixMatch m = tree.MatchPrefix("t", Tokens{1, 2, 3, 9});
  EXPECT_EQ(m.length, 3);
  ASSERT_NE(m.node, nullptr);
  EXPECT_EQ(m.node->tokens, (Tokens{1, 2, 3}));
  EXPECT_EQ(m.node->rows, std::vector<kv::RowRef>(r.begin(), r.begin() + 3));
  ASSERT_EQ(m.node->children.size(), 1u);
  EXPECT_EQ(m.node->children.begin()->second->tokens, (Tokens{4, 5}));
  EXPECT_EQ(tree.stats().nodes, 2);
  EXPECT_EQ(tree.stats().tokens, 5);
  // The whole edge still matches across the split.
  const PrefixMatch all = tree.MatchPrefix("t", Tokens{1, 2, 3, 4, 5});
  EXPECT_EQ(all.length, 5);
  EXPECT_EQ(all.rows, r);
  // A diverging insert splits too and keeps both branches.
  const auto r2 = pool.Rows(4);
  EXPECT_EQ(tree.Insert("t", Tokens{1, 2, 7, 8}, r2), 2);
  pool.Drop(std::span(r2).first(2));
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{1, 2, 7, 8}).length, 4);
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{1, 2, 3, 4, 5}).length, 5);
  EXPECT_EQ(tree.stats().tokens, 7);
}

TEST(RadixTree, ALockedPathIsNeverEvicted) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  tree.Insert("t", Tokens{1, 2, 3}, pool.Rows(3));
  tree.Insert("t", Tokens{4, 5, 6}, pool.Rows(3));
  const PrefixMatch m = tree.MatchPrefix("t", Tokens{1, 2});  // splits {1,2} | {3}
  tree.Lock(m.node);
  EXPECT_EQ(tree.Evict(1000), 4u);  // {4,5,6} and the unlocked leaf {3}
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{1, 2, 3}).length, 2);
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{4}).length, 0);
  EXPECT_EQ(tree.locked_bytes(), 2u);
  EXPECT_EQ(tree.Evict(1000), 0u);
  tree.Unlock(m.node);
  EXPECT_EQ(tree.Evict(1000), 2u);
  EXPECT_EQ(tree.stats().tokens, 0);
  EXPECT_EQ(pool.live(), 0u);
}

TEST(RadixTree, EvictsLeastRecentlyUsedFirst) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  const auto ra = pool.Rows(2), rb = pool.Rows(2), rc = pool.Rows(2);
  tree.Insert("t", Tokens{1, 1}, ra);
  tree.Insert("t", Tokens{2, 2}, rb);
  tree.Insert("t", Tokens{3, 3}, rc);
  tree.MatchPrefix("t", Tokens{1, 1});  // a is now the most recent
  tree.Evict(1);
  EXPECT_EQ(pool.released_, rb);
  tree.Evict(1);
  EXPECT_EQ(std::vector<kv::RowRef>(pool.released_.begin() + 2, pool.released_.end()), rc);
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{1, 1}).length, 2);
  EXPECT_EQ(tree.stats().evictions, 2);
  EXPECT_EQ(tree.stats().evicted_tokens, 4);
}

TEST(RadixTree, InsertKeepsTheByteBudget) {
  SimPool pool;
  RadixTree tree(&pool, /*bytes_per_token=*/10, /*budget=*/100);
  const auto ra = pool.Rows(6);
  tree.Insert("t", Tokens{1, 2, 3, 4, 5, 6}, ra);
  EXPECT_EQ(tree.stats().bytes, 60);
  tree.Insert("t", Tokens{9, 8, 7, 6, 5, 4}, pool.Rows(6));  // 120 > 100: the older goes
  EXPECT_EQ(pool.released_, ra);
  EXPECT_EQ(tree.stats().bytes, 60);
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{9, 8}).length, 2);
  EXPECT_EQ(tree.MatchPrefix("t", Tokens{1, 2}).length, 0);
}

TEST(RadixTree, EvictingALeafMakesItsParentALeaf) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  tree.Insert("t", Tokens{1, 2, 3, 4}, pool.Rows(4));
  const auto r = pool.Rows(4);
  tree.Insert("t", Tokens{1, 2, 5, 6}, r);  // {1,2} -> {3,4}, {5,6}
  pool.Drop(std::span(r).first(2));
  EXPECT_EQ(tree.stats().nodes, 3);
  EXPECT_EQ(tree.Evict(6), 6u);  // both branches, then their parent
  EXPECT_EQ(tree.stats().nodes, 0);
  EXPECT_EQ(pool.live(), 0u);
}

TEST(RadixTree, TenantsNeverMatchEachOther) {
  SimPool pool;
  RadixTree tree(&pool, 1, 0);
  const Tokens prompt = {5, 6, 7, 8, 9, 10, 11, 12};
  tree.Insert("a", prompt, pool.Rows(prompt.size()));
  const PrefixMatch b = tree.MatchPrefix("b", prompt);
  EXPECT_EQ(b.length, 0);
  EXPECT_TRUE(b.rows.empty());
  // B's insert of the same tokens finds nothing of A's: it keeps B's own rows.
  const auto rb = pool.Rows(prompt.size());
  EXPECT_EQ(tree.Insert("b", prompt, rb), 0);
  EXPECT_EQ(tree.MatchPrefix("b", prompt).rows, rb);
  EXPECT_EQ(tree.stats().tokens, 16);
}

TEST(RadixTree, AMissCostsTheSameWhateverAnotherTenantCached) {
  const Tokens prompt = {5, 6, 7, 8, 9, 10, 11, 12};
  auto visits_of_b = [&](bool a_cached) {
    SimPool pool;
    RadixTree tree(&pool, 1, 0);
    if (a_cached) {
      tree.Insert("a", prompt, pool.Rows(prompt.size()));
      tree.Insert("a", Tokens{5, 6, 1, 2}, pool.Rows(4));
    }
    tree.Insert("b", Tokens{99}, pool.Rows(1));
    const int64_t before = tree.nodes_visited();
    EXPECT_EQ(tree.MatchPrefix("b", prompt).length, 0);
    return tree.nodes_visited() - before;
  };
  EXPECT_EQ(visits_of_b(true), visits_of_b(false));
  EXPECT_EQ(visits_of_b(false), 1);  // B's root only: none of A's nodes
}

TEST(RadixTree, DestructionGivesEveryRowBack) {
  SimPool pool;
  {
    RadixTree tree(&pool, 1, 0);
    tree.Insert("a", Tokens{1, 2, 3}, pool.Rows(3));
    tree.Insert("b", Tokens{1, 2, 3}, pool.Rows(3));
    const auto r = pool.Rows(3);
    tree.Insert("a", Tokens{1, 4, 5}, r);
    pool.Drop(std::span(r).first(1));
    tree.MatchPrefix("a", Tokens{1, 2});
  }
  EXPECT_EQ(pool.live(), 0u);
}

}  // namespace
}  // namespace kvmem::memory::prefix
