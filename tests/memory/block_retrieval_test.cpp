// MemArt's block index and scores (memory/retrieval/): boxes against per-dimension min/max
// computed directly, Eq. 3 against the maximum dot product over the block's keys (an upper
// bound, tight for one-key blocks) and against a double-precision evaluation of the formula,
// Table 1's four strategies against hand-computed values, and top-k selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "memory/retrieval/block_index.h"
#include "memory/retrieval/block_scoring.h"

namespace kvmem::memory {
namespace {

std::vector<float> Gaussian(std::mt19937* rng, size_t n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(F16Rounding, BracketsEveryValue) {
  std::mt19937 rng(3);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           65504.0f,
                           -65504.0f,
                           1e-8f,
                           -1e-8f,
                           7e4f,
                           -7e4f,
                           std::numeric_limits<float>::denorm_min()};
  for (float x : Gaussian(&rng, 2000, 10.0f)) xs.push_back(x);
  for (float x : xs) {
    const float lo = F16ToF32(F16RoundDown(x)), hi = F16ToF32(F16RoundUp(x));
    EXPECT_LE(lo, x) << x;
    EXPECT_GE(hi, x) << x;
    // Adjacent halves (or equal when x is a half): nothing representable in between.
    if (lo != hi) {
      EXPECT_EQ(F32ToF16(lo) + (x > 0 ? 1 : -1), F32ToF16(hi)) << x;
    }
  }
  EXPECT_EQ(F16RoundDown(1.0f), F32ToF16(1.0f));
  EXPECT_EQ(F16RoundUp(1.0f), F32ToF16(1.0f));
  EXPECT_TRUE(std::isinf(F16ToF32(F16RoundUp(7e4f))));
}

TEST(BlockIndex, BoxesEncloseTheirKeysTightly) {
  const int n_layers = 2, n_kv = 2, hd = 8, bs = 16;
  BlockIndex index(n_layers, n_kv, hd);
  std::mt19937 rng(5);
  std::vector<std::vector<float>> keys;  // per (block, layer, head): (bs, hd)
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(index.AddBlock(), b);
    for (int l = 0; l < n_layers; ++l) {
      for (int h = 0; h < n_kv; ++h) {
        keys.push_back(Gaussian(&rng, bs * hd, 2.0f));
        // Two calls (rows 0..4 and 5..15) widen the same box.
        index.Enclose(b, l, h, keys.back().data(), 5, hd);
        index.Enclose(b, l, h, keys.back().data() + 5 * hd, bs - 5, hd);
      }
    }
  }
  int i = 0;
  for (int b = 0; b < 3; ++b) {
    for (int l = 0; l < n_layers; ++l) {
      for (int h = 0; h < n_kv; ++h, ++i) {
        const auto box = index.Box(b, l, h);
        for (int d = 0; d < hd; ++d) {
          float mn = INFINITY, mx = -INFINITY;
          for (int r = 0; r < bs; ++r) {
            mn = std::min(mn, keys[i][r * hd + d]);
            mx = std::max(mx, keys[i][r * hd + d]);
          }
          EXPECT_EQ(box[d], F16RoundDown(mn));
          EXPECT_EQ(box[hd + d], F16RoundUp(mx));
        }
      }
    }
  }
  EXPECT_EQ(index.bytes(), 3u * n_layers * n_kv * 2 * hd * 2);
  // Persistence round trip, and a mismatched load refused.
  BlockIndex copy(n_layers, n_kv, hd);
  for (int l = 0; l < n_layers; ++l) ASSERT_TRUE(copy.LoadLayer(l, 3, index.LayerBoxes(l)).ok());
  for (int l = 0; l < n_layers; ++l) EXPECT_EQ(copy.LayerBoxes(l), index.LayerBoxes(l));
  EXPECT_FALSE(copy.LoadLayer(1, 2, std::vector<uint16_t>(2 * n_kv * 2 * hd)).ok());
  EXPECT_FALSE(copy.LoadLayer(0, 3, std::vector<uint16_t>(5)).ok());
  EXPECT_FALSE(copy.LoadLayer(7, 3, index.LayerBoxes(0)).ok());
  index.Truncate(1);
  EXPECT_EQ(index.n_blocks(), 1);
  EXPECT_EQ(index.HeadBoxes(1, 1).size(), 2u * hd);
}

// Eq. 3 in double precision from the stored box.
double Eq3(const BlockIndex& index, int64_t block, int layer, int head, const float* q,
           float scale) {
  const auto box = index.Box(block, layer, head);
  const int hd = index.head_dim();
  double s = 0;
  for (int d = 0; d < hd; ++d) {
    s += std::max(double{q[d]} * F16ToF32(box[d]), double{q[d]} * F16ToF32(box[hd + d]));
  }
  return scale * s;
}

TEST(BlockUpperBounds, MatchesEq3AndBoundsEveryKey) {
  const int n_layers = 2, n_kv = 2, group = 3, n_heads = n_kv * group, hd = 64, bs = 8;
  const int n_blocks = 37, n_tokens = 5;
  const float scale = 0.125f;
  BlockIndex index(n_layers, n_kv, hd);
  std::mt19937 rng(9);
  // keys[layer][head][block]: (bs, hd); block 0 holds one key only (a tight bound).
  std::vector<std::vector<std::vector<std::vector<float>>>> keys(
      n_layers, std::vector<std::vector<std::vector<float>>>(n_kv));
  for (int b = 0; b < n_blocks; ++b) {
    index.AddBlock();
    const int rows = b == 0 ? 1 : bs;
    for (int l = 0; l < n_layers; ++l) {
      for (int h = 0; h < n_kv; ++h) {
        keys[l][h].push_back(Gaussian(&rng, rows * hd, 1.0f + 0.1f * b));
        index.Enclose(b, l, h, keys[l][h].back().data(), rows, hd);
      }
    }
  }
  const std::vector<float> q = Gaussian(&rng, n_tokens * n_heads * hd, 1.0f);
  ThreadPool pool(2);
  for (int l = 0; l < n_layers; ++l) {
    std::vector<float> bounds;
    BlockUpperBounds(index, l, q.data(), n_tokens, n_heads, scale, &pool, &bounds);
    ASSERT_EQ(bounds.size(), static_cast<size_t>(n_tokens * n_heads * n_blocks));
    for (int t = 0; t < n_tokens; ++t) {
      for (int h = 0; h < n_heads; ++h) {
        const float* qr = q.data() + (t * n_heads + h) * hd;
        const int g = h / group;
        double qmag = 0;
        for (int d = 0; d < hd; ++d) qmag += std::fabs(qr[d]);
        for (int b = 0; b < n_blocks; ++b) {
          const float got = bounds[(t * n_heads + h) * n_blocks + b];
          const double want = Eq3(index, b, l, g, qr, scale);
          // q rounded to f16 for the product: |error| <= 2^-11 |q| . |box| (+ f32 sums).
          const auto box = index.Box(b, l, g);
          double boxmag = 0;
          for (int d = 0; d < hd; ++d) {
            boxmag = std::max<double>(
                boxmag, std::max(std::fabs(F16ToF32(box[d])), std::fabs(F16ToF32(box[hd + d]))));
          }
          const double tol = scale * qmag * boxmag * 1e-3;
          ASSERT_NEAR(got, want, tol)
              << "layer " << l << " token " << t << " head " << h << " block " << b;
          // Upper bound on every key of the block; equal (up to f16) for a one-key block.
          const std::vector<float>& kb = keys[l][g][b];
          double best = -INFINITY;
          for (size_t r = 0; r < kb.size() / hd; ++r) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += double{qr[d]} * kb[r * hd + d];
            best = std::max(best, scale * dot);
          }
          ASSERT_GE(got, best - tol) << "block " << b;
          if (b == 0) {
            ASSERT_NEAR(got, best, tol + scale * qmag * 2 * std::ldexp(boxmag, -11));
          }
        }
      }
    }
  }
}

// The centre score (a documented deviation from Eq. 3) is scale * q . (min + max) / 2 of the
// stored box, computed here in double precision.
TEST(BlockUpperBounds, CentreScoreIsTheDotWithTheBoxCentre) {
  const int n_kv = 2, group = 2, n_heads = n_kv * group, hd = 32, n_blocks = 9, n_tokens = 3;
  const float scale = 0.25f;
  BlockIndex index(1, n_kv, hd);
  std::mt19937 rng(4);
  for (int b = 0; b < n_blocks; ++b) {
    index.AddBlock();
    for (int h = 0; h < n_kv; ++h)
      index.Enclose(b, 0, h, Gaussian(&rng, 4 * hd, 1.0f).data(), 4, hd);
  }
  const std::vector<float> q = Gaussian(&rng, n_tokens * n_heads * hd, 1.0f);
  std::vector<float> got;
  BlockUpperBounds(index, 0, q.data(), n_tokens, n_heads, scale, nullptr, &got,
                   BlockScore::kCentre);
  for (int t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      const float* qr = q.data() + (t * n_heads + h) * hd;
      for (int b = 0; b < n_blocks; ++b) {
        const auto box = index.Box(b, 0, h / group);
        double want = 0, mag = 0;
        for (int d = 0; d < hd; ++d) {
          const double c = 0.5 * (double{F16ToF32(box[d])} + F16ToF32(box[hd + d]));
          want += double{qr[d]} * c;
          mag += std::fabs(qr[d]) * std::fabs(c);
        }
        // q rounded to f16 for the product (2^-11 relative), f32 sums.
        EXPECT_NEAR(got[(t * n_heads + h) * n_blocks + b], scale * want, scale * mag * 1e-3);
      }
    }
  }
  const auto parsed = ParseStrategy("rr-max-centre");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->block_score, BlockScore::kCentre);
  EXPECT_EQ(parsed->norm, ScoreNorm::kReciprocalRank);
  EXPECT_EQ(StrategyName(*parsed), "rr-max-centre");
  EXPECT_FALSE(ParseStrategy("centre").ok());
}

// The exact score is scale * max over the block's keys of q . k (double-precision brute force,
// GQA: Q head h reads KV head h / group), with a partial last block; it never exceeds Eq. 3's
// bound of the same keys' box beyond f16 rounding.
TEST(BlockExactScores, MaxDotOverEachBlocksKeys) {
  const int n_kv = 2, group = 3, n_heads = n_kv * group, hd = 16, bs = 8, n_tokens = 4;
  const int64_t n_keys = 5 * bs + 3;  // 6 blocks, the last with 3 keys
  const float scale = 0.25f;
  std::mt19937 rng(11);
  const std::vector<float> keys = Gaussian(&rng, n_keys * n_kv * hd, 1.0f);
  const std::vector<float> q = Gaussian(&rng, n_tokens * n_heads * hd, 1.0f);
  std::vector<float> got;
  ThreadPool pool(2);
  BlockExactScores(keys, n_kv, hd, bs, q.data(), n_tokens, n_heads, scale, &pool, &got);
  const int64_t n_blocks = 6;
  ASSERT_EQ(got.size(), static_cast<size_t>(n_tokens * n_heads * n_blocks));
  BlockIndex index(1, n_kv, hd);
  for (int64_t b = 0; b < n_blocks; ++b) {
    index.AddBlock();
    for (int64_t r = b * bs; r < std::min<int64_t>(n_keys, (b + 1) * bs); ++r) {
      for (int g = 0; g < n_kv; ++g)
        index.Enclose(b, 0, g, keys.data() + (r * n_kv + g) * hd, 1, hd);
    }
  }
  std::vector<float> bounds;
  BlockUpperBounds(index, 0, q.data(), n_tokens, n_heads, scale, nullptr, &bounds);
  for (int t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      const float* qr = q.data() + (t * n_heads + h) * hd;
      for (int64_t b = 0; b < n_blocks; ++b) {
        double want = -INFINITY;
        for (int64_t r = b * bs; r < std::min<int64_t>(n_keys, (b + 1) * bs); ++r) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double{qr[d]} * keys[(r * n_kv + h / group) * hd + d];
          want = std::max(want, scale * dot);
        }
        const size_t i = (t * n_heads + h) * n_blocks + b;
        EXPECT_NEAR(got[i], want, 1e-4) << "token " << t << " head " << h << " block " << b;
        EXPECT_LE(got[i], bounds[i] + 0.02) << "token " << t << " head " << h << " block " << b;
      }
    }
  }
  const auto parsed = ParseStrategy("softmax-sum-exact");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->block_score, BlockScore::kExact);
  EXPECT_EQ(StrategyName(*parsed), "softmax-sum-exact");
}

TEST(AggregateScores, Table1HandComputed) {
  // Two query rows over three blocks.
  const std::vector<float> bounds = {
      1.0f, 2.0f, 0.0f,   // row 0: ranks 2, 1, 3
      3.0f, 0.0f, 3.0f};  // row 1: ranks 1, 3, 2 (tie: earlier first)
  const double s0 = std::exp(-1.0) + 1 + std::exp(-2.0);  // row 0: sum of exp(bound - 2)
  const std::vector<double> p0 = {std::exp(-1.0) / s0, 1 / s0, std::exp(-2.0) / s0};
  const double s1 = 2 + std::exp(-3.0);  // row 1: sum of exp(bound - 3)
  const std::vector<double> p1 = {1 / s1, std::exp(-3.0) / s1, 1 / s1};
  const double c = 60;
  const std::vector<double> r0 = {1 / (2 + c), 1 / (1 + c), 1 / (3 + c)};
  const std::vector<double> r1 = {1 / (1 + c), 1 / (3 + c), 1 / (2 + c)};
  struct Case {
    RetrievalStrategy s;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {{ScoreNorm::kSoftmax, ScoreAgg::kSum}, {p0[0] + p1[0], p0[1] + p1[1], p0[2] + p1[2]}},
      {{ScoreNorm::kSoftmax, ScoreAgg::kMax},
       {std::max(p0[0], p1[0]), std::max(p0[1], p1[1]), std::max(p0[2], p1[2])}},
      {{ScoreNorm::kReciprocalRank, ScoreAgg::kSum}, {r0[0] + r1[0], r0[1] + r1[1], r0[2] + r1[2]}},
      {{ScoreNorm::kReciprocalRank, ScoreAgg::kMax},
       {std::max(r0[0], r1[0]), std::max(r0[1], r1[1]), std::max(r0[2], r1[2])}},
  };
  for (const Case& cs : cases) {
    const std::vector<double> got = AggregateScores(bounds, 2, 3, cs.s);
    ASSERT_EQ(got.size(), 3u);
    for (int b = 0; b < 3; ++b) EXPECT_NEAR(got[b], cs.want[b], 1e-12) << StrategyName(cs.s);
    // The name round-trips through the parser.
    const auto parsed = ParseStrategy(StrategyName(cs.s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(StrategyName(*parsed), StrategyName(cs.s));
  }
  EXPECT_FALSE(ParseStrategy("softmax-mean").ok());
  // Softmax stays finite for large logits.
  const std::vector<float> big = {1000.0f, 999.0f};
  const std::vector<double> sm = AggregateScores(big, 1, 2, {});
  EXPECT_NEAR(sm[0], 1 / (1 + std::exp(-1.0)), 1e-12);
}

TEST(TopKChronological, HighestScoresInIndexOrder) {
  const std::vector<double> scores = {0.1, 0.9, 0.3, 0.9, 0.5};
  EXPECT_EQ(TopKChronological(scores, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(TopKChronological(scores, 3), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(TopKChronological(scores, 0), (std::vector<int64_t>{}));
  EXPECT_EQ(TopKChronological(scores, 99), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Ties: the earlier block wins.
  const std::vector<double> tied = {0.5, 0.5, 0.5};
  EXPECT_EQ(TopKChronological(tied, 2), (std::vector<int64_t>{0, 1}));
}

TEST(TopKWithNeighbors, FoundBlocksBringTheirNeighbours) {
  //                                  0    1    2    3    4    5    6    7    8    9
  const std::vector<double> scores = {0.0, 0.1, 0.2, 0.9, 0.3, 0.0, 0.0, 0.8, 0.0, 0.5};
  // 3 first, then 4 (after) and 2 (before); then 7 with 8 and 6; then 9 (8 is taken) ...
  EXPECT_EQ(TopKWithNeighbors(scores, 3, 1), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(TopKWithNeighbors(scores, 5, 1), (std::vector<int64_t>{2, 3, 4, 7, 8}));
  EXPECT_EQ(TopKWithNeighbors(scores, 7, 1), (std::vector<int64_t>{2, 3, 4, 6, 7, 8, 9}));
  // Two on each side: 3, 4, 2, 5, 1, then 7, 8, 6, 9.
  EXPECT_EQ(TopKWithNeighbors(scores, 4, 2), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(TopKWithNeighbors(scores, 8, 2), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // The edges: block 0's only neighbour is 1.
  const std::vector<double> edge = {0.9, 0.0, 0.0, 0.5};
  EXPECT_EQ(TopKWithNeighbors(edge, 3, 1), (std::vector<int64_t>{0, 1, 3}));
  // No neighbours, or k covering everything: the plain top k.
  EXPECT_EQ(TopKWithNeighbors(scores, 3, 0), TopKChronological(scores, 3));
  EXPECT_EQ(TopKWithNeighbors(scores, 99, 1), TopKChronological(scores, 99));
  EXPECT_EQ(TopKWithNeighbors(scores, 0, 1), (std::vector<int64_t>{}));
}

TEST(TopKWithNeighbors, TurnBoundedNeighboursStayInTheFoundTurn) {
  //                                  0    1    2    3    4    5    6    7    8    9
  const std::vector<double> scores = {0.0, 0.1, 0.2, 0.9, 0.3, 0.0, 0.0, 0.8, 0.0, 0.5};
  // Turns: blocks 0-1, 2-3, 4-6, 7-9.
  const std::vector<BlockSpan> spans = {{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 6},
                                        {4, 6}, {4, 6}, {7, 9}, {7, 9}, {7, 9}};
  // 3 brings 2 (4, 5 and 1 are other turns); 7 brings 8 and 9 (6 and 5 are not its turn).
  EXPECT_EQ(TopKWithNeighbors(scores, 5, 2, spans), (std::vector<int64_t>{2, 3, 7, 8, 9}));
  // Unbounded, the same k is spent around block 3 alone.
  EXPECT_EQ(TopKWithNeighbors(scores, 5, 2), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // Then 9 (taken) and 4, which brings 5 of its own turn.
  EXPECT_EQ(TopKWithNeighbors(scores, 7, 2, spans), (std::vector<int64_t>{2, 3, 4, 5, 7, 8, 9}));
  // A block's own span does not limit the blocks found by score: one block per turn.
  const std::vector<BlockSpan> single = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4},
                                         {5, 5}, {6, 6}, {7, 7}, {8, 8}, {9, 9}};
  EXPECT_EQ(TopKWithNeighbors(scores, 4, 2, single), TopKChronological(scores, 4));
}

}  // namespace
}  // namespace kvmem::memory
