// H2O's eviction policy (memory/eviction/h2o.h) without a model:
//   - H2oKeep on a hand-computed example (ties to the more recent row) and its properties on
//     random scores with many ties: min(n, budget) rows kept, the recent rows always, and no
//     evicted row outranks a kept heavy hitter;
//   - PlanH2o / ApplyH2o on a paged sequence: each (layer, KV head) list ends up holding exactly
//     its own kept candidates (checked against a brute-force ranking) and the non-candidate rows,
//     all at their original positions; a row already hidden from a list is no candidate there.
#include "memory/eviction/h2o.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace kvmem::memory {
namespace {

using Ids = std::vector<int64_t>;

TEST(H2oKeep, HandComputedExample) {
  //                              0    1    2    3    4    5    6    7
  const std::vector<double> s = {5.0, 1.0, 3.0, 3.0, 0.5, 2.0, 9.0, 0.1};
  // Recent rows 6, 7; heavy hitters among 0..5: row 0 (5.0), then 2 and 3 tie at 3.0 and the
  // more recent, 3, wins.
  EXPECT_EQ(H2oKeep(s, 4, 2), (Ids{0, 3, 6, 7}));
  EXPECT_EQ(H2oKeep(s, 5, 2), (Ids{0, 2, 3, 6, 7}));
  // All heavy: row 6's 9.0 competes too.
  EXPECT_EQ(H2oKeep(s, 3, 0), (Ids{0, 3, 6}));
  // All recent.
  EXPECT_EQ(H2oKeep(s, 3, 3), (Ids{5, 6, 7}));
  // Enough room: everything.
  EXPECT_EQ(H2oKeep(s, 8, 4), (Ids{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(H2oKeep(s, 100, 50).size(), 8u);
  EXPECT_EQ(H2oKeep({}, 4, 2), Ids{});
  EXPECT_EQ(H2oKeep(s, 0, 0), Ids{});
}

TEST(H2oKeep, RecentRowsRoundHalfTheBudget) {
  EXPECT_EQ(H2oRecentRows({256, 0.5}), 128);
  EXPECT_EQ(H2oRecentRows({5, 0.5}), 3);
  EXPECT_EQ(H2oRecentRows({5, 0.0}), 0);
  EXPECT_EQ(H2oRecentRows({5, 1.0}), 5);
  EXPECT_EQ(H2oRecentRows({5, 1.5}), 5);
  EXPECT_EQ(H2oRecentRows({5, -1.0}), 0);
}

TEST(H2oKeep, PropertiesOnRandomScores) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = rng() % 60;
    const int64_t budget = rng() % 40;
    const int64_t recent = budget == 0 ? 0 : rng() % (budget + 1);
    std::vector<double> s(n);
    for (double& v : s) v = static_cast<double>(rng() % 6);  // many ties
    const Ids kept = H2oKeep(s, budget, recent);
    ASSERT_EQ(static_cast<int64_t>(kept.size()), std::min(n, budget));
    ASSERT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    ASSERT_EQ(std::set<int64_t>(kept.begin(), kept.end()).size(), kept.size());
    if (n <= budget) continue;
    const std::set<int64_t> k(kept.begin(), kept.end());
    for (int64_t i = n - recent; i < n; ++i) EXPECT_TRUE(k.count(i)) << "recent row " << i;
    // A kept heavy hitter h and an evicted row e: e never has the larger score, nor the same
    // score while being more recent.
    for (int64_t h : kept) {
      if (h >= n - recent) continue;
      for (int64_t e = 0; e < n - recent; ++e) {
        if (k.count(e)) continue;
        EXPECT_TRUE(s[e] < s[h] || (s[e] == s[h] && e < h))
            << "trial " << trial << ": evicted " << e << " (" << s[e] << ") over kept " << h << " ("
            << s[h] << ")";
      }
    }
  }
}

// The ranking spelled out: sort the older rows by (score, index) descending, take `heavy`.
Ids BruteForceKeep(const std::vector<double>& s, int64_t budget, int64_t recent) {
  const int64_t n = static_cast<int64_t>(s.size());
  if (n <= budget) {
    Ids all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  std::vector<std::pair<double, int64_t>> older;
  for (int64_t i = 0; i < n - recent; ++i) older.push_back({s[i], i});
  std::sort(older.rbegin(), older.rend());
  Ids kept;
  for (int64_t i = 0; i < budget - recent; ++i) kept.push_back(older[i].second);
  for (int64_t i = n - recent; i < n; ++i) kept.push_back(i);
  std::sort(kept.begin(), kept.end());
  return kept;
}

class H2oPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_layers = 2;
    spec_.n_heads = 4;
    spec_.n_kv_heads = 2;
    // 20 history rows (blocks of 8: 8 + 8 + 4) at positions 0..19, then 5 question rows.
    ASSERT_TRUE(seq_.AppendRows(20, 0).ok());
    ASSERT_TRUE(seq_.AppendRows(5, 20).ok());
  }

  // Live (block, row) -> position of one list.
  std::map<std::pair<int32_t, int32_t>, int64_t> Live(int l, int g) const {
    std::map<std::pair<int32_t, int32_t>, int64_t> rows;
    for (const kv::ViewRun& r : seq_.view().list(l, g)) {
      if (r.dead()) continue;
      for (int32_t j = 0; j < r.n_rows; ++j) rows[{r.block, r.first_row + j}] = r.first_pos + j;
    }
    return rows;
  }

  kv::RowRef Ref(int64_t i) const { return {seq_.blocks()[i / 8], static_cast<int32_t>(i % 8)}; }

  model::ModelSpec spec_;
  kv::KvPool pool_{{2, 2, 8, 8, 8}, 8};
  kv::KvSequence seq_{&pool_};
};

TEST_F(H2oPlanTest, EachHeadKeepsItsOwnHeavyHittersAndTheQuestion) {
  std::mt19937 rng(5);
  AttentionScores scores(spec_);
  std::vector<std::vector<double>> s(4, std::vector<double>(20));
  for (int l = 0; l < 2; ++l) {
    for (int g = 0; g < 2; ++g) {
      for (int64_t i = 0; i < 25; ++i) {
        const double w = static_cast<double>(rng() % 7);
        scores.AddWeight(l, g, i, w);
        if (i < 20) s[l * 2 + g][i] = w;
      }
    }
  }
  // Row 2 already hidden from layer 1, head 0: not a candidate there.
  seq_.view().Hide(Ref(2), 1, 1, 0);
  const H2oConfig config{6, 0.5};
  const H2oPlan plan = PlanH2o(scores, seq_, 20, config);
  ApplyH2o(plan, &seq_);
  for (int l = 0; l < 2; ++l) {
    for (int g = 0; g < 2; ++g) {
      // The candidates in list order, with their scores.
      Ids cand;
      std::vector<double> cs;
      for (int64_t i = 0; i < 20; ++i) {
        if (l == 1 && g == 0 && i == 2) continue;
        cand.push_back(i);
        cs.push_back(s[l * 2 + g][i]);
      }
      Ids expected;
      for (int64_t k : BruteForceKeep(cs, 6, 3)) expected.push_back(cand[k]);
      EXPECT_EQ(plan.kept_of(l, g), expected) << l << "," << g;
      std::map<std::pair<int32_t, int32_t>, int64_t> want;
      for (int64_t i : expected) want[{Ref(i).block, Ref(i).row}] = i;
      for (int64_t i = 20; i < 25; ++i) want[{Ref(i).block, Ref(i).row}] = i;
      EXPECT_EQ(Live(l, g), want) << l << "," << g;
      EXPECT_EQ(seq_.view().n_rows(l, g), 6 + 5);
    }
  }
  // Different heads of a layer kept different rows (their scores differ).
  EXPECT_NE(plan.kept_of(0, 0), plan.kept_of(0, 1));
}

TEST_F(H2oPlanTest, BudgetAboveTheCandidatesEvictsNothing) {
  AttentionScores scores(spec_);
  scores.AddWeight(0, 0, 24, 1.0);
  const H2oPlan plan = PlanH2o(scores, seq_, 20, {20, 0.5});
  for (const auto& ev : plan.evicted) EXPECT_TRUE(ev.empty());
  for (const auto& kept : plan.kept) EXPECT_EQ(kept.size(), 20u);
  ApplyH2o(plan, &seq_);
  for (int l = 0; l < 2; ++l) {
    for (int g = 0; g < 2; ++g) EXPECT_EQ(seq_.view().n_rows(l, g), 25);
  }
}

}  // namespace
}  // namespace kvmem::memory
