// IntentKV's pieces without a policy: Eq. 1's top-k, dead slots against a hard mask and the
// paper's sentinel row, alias-aware block freeing (§3.4 (a)-(c)), compaction, Eq. 2 and Eq. 3
// against hand-computed references, and the prompt's spans.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../model/tiny_model.h"
#include "core/fp16.h"
#include "engine/forward.h"
#include "memory/intent/query_memory.h"
#include "memory/intent/slot_map_eviction.h"
#include "memory/intent/turn_spans.h"
#include "model/model.h"

namespace kvmem::memory {
namespace {

kv::KvGeometry Geometry() { return {/*n_layers=*/2, /*n_kv_heads=*/1, 8, 8, /*block_rows=*/4}; }

// n rows of random f16 K/V at positions 0.. in every layer.
void FillRandom(kv::KvSequence* seq, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  const kv::KvGeometry& g = seq->pool()->geometry();
  auto rows = seq->AppendRows(n, 0);
  ASSERT_TRUE(rows.ok());
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  for (int i = 0; i < n; ++i) {
    for (int l = 0; l < g.n_layers; ++l) {
      for (float& x : k) x = d(rng);
      for (float& x : v) x = d(rng);
      seq->pool()->WriteToken((*rows)[i], l, k.data(), v.data());
    }
    seq->pool()->set_rotated_pos((*rows)[i], i);
  }
}

TEST(TopScored, KeepsTheHighestTiesToTheMoreRecent) {
  const std::vector<int64_t> cand = {0, 2, 3, 5, 6};
  const std::vector<double> score = {9, 0, 1, 4, 0, 4, 1};
  EXPECT_EQ(TopScored(cand, score, 2), (std::vector<int64_t>{0, 5}));  // 5 beats 3 on the tie
  EXPECT_EQ(TopScored(cand, score, 3), (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(TopScored(cand, score, 9), cand);
  EXPECT_TRUE(TopScored(cand, score, 0).empty());
}

TEST(DeadSlots, ReadExactlyAsAHardMaskAndAsThePapersSentinel) {
  kv::KvPool pool(Geometry(), 16, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  FillRandom(&seq, 16, 1);
  const std::vector<int64_t> drop = {3, 4, 5, 9, 12};
  // The dead-slot list, and the hard mask: the same rows simply left out.
  kv::KvView dead = seq.view().Clone();
  kv::KvView mask = seq.view().Clone();
  for (int64_t i : drop) {
    dead.Kill(kv::RowAt(seq, i), 1);
    mask.Hide(kv::RowAt(seq, i), 1);
  }
  auto spans_of = [&](const std::vector<kv::ViewRun>& list) {
    std::vector<kernels::KvSpan> s;
    for (const kv::ViewRun& r : list) {
      if (!r.dead()) s.push_back(pool.Span(r.block, 0, 0, r.first_row, r.n_rows));
    }
    return s;
  };
  EXPECT_EQ(dead.n_slots(0), 16);  // the survivors keep their slots
  EXPECT_EQ(dead.n_rows(0), 11);
  std::mt19937 rng(2);
  std::normal_distribution<float> d;
  std::vector<float> q(8);
  for (float& x : q) x = d(rng);
  float sum = 0;
  for (float x : q) sum += x;
  if (sum < 0) {
    for (float& x : q) x = -x;  // the sentinel's logit is -1e4 * sum(q) * scale: see below
  }
  const float scale = 1.0f / std::sqrt(8.0f);
  std::vector<float> out_dead(8), out_mask(8), out_sentinel(8);
  auto a = spans_of(dead.list(0, 0)), b = spans_of(mask.list(0, 0));
  pool.Attend(q.data(), a.data(), int(a.size()), scale, out_dead.data());
  pool.Attend(q.data(), b.data(), int(b.size()), scale, out_mask.data());
  EXPECT_EQ(out_dead, out_mask);  // bit for bit: the dead slots are never read
  // The paper's sentinel: the dropped rows kept in the list, K = -1e4 and V = 0.
  for (int64_t i : drop) {
    const kv::RowRef r = kv::RowAt(seq, i);
    for (int j = 0; j < 8; ++j) {
      pool.K(r.block, 0, 0)[r.row * 8 + j] = F32ToF16(-1e4f);
      pool.V(r.block, 0, 0)[r.row * 8 + j] = F32ToF16(0.0f);
    }
  }
  auto c = spans_of(seq.view().list(0, 0));
  pool.Attend(q.data(), c.data(), int(c.size()), scale, out_sentinel.data());
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(out_sentinel[j], out_mask[j], 1e-6f) << j;
  // With sum(q) < 0 the same sentinel takes all the weight (its logit is +1e4 * |sum| * scale):
  // the sentinel is a mask only for such queries, which is why kvmem skips dead slots instead.
  for (float& x : q) x = -x;
  pool.Attend(q.data(), c.data(), int(c.size()), scale, out_sentinel.data());
  pool.Attend(q.data(), b.data(), int(b.size()), scale, out_mask.data());
  float gap = 0;
  for (int j = 0; j < 8; ++j) gap = std::max(gap, std::fabs(out_sentinel[j] - out_mask[j]));
  EXPECT_GT(gap, 1e-2f);
}

TEST(FreeableBlocks, FollowsTheAliasRules) {
  kv::KvPool pool(Geometry(), 16);
  kv::KvSequence seq(&pool);
  FillRandom(&seq, 22, 3);  // blocks of 4: 0..5, the last (rows 20, 21) takes new rows
  std::vector<uint8_t> live(22, 1);
  for (int64_t i = 0; i < 22; ++i) {
    if ((i >= 4 && i < 16) || i >= 20 || i < 2) live[i] = 0;  // blocks 1-3 and 5 dead, block 0 half
  }
  live[13] = 1;  // a kept row in block 3
  // (a) the protected prefix covers block 1; (c) block 3 holds a kept row.
  EXPECT_EQ(FreeableBlocks(seq, live, /*protected_rows=*/6, {}), (std::vector<size_t>{2}));
  EXPECT_EQ(FreeableBlocks(seq, live, 0, {}), (std::vector<size_t>{1, 2}));
  // (c) a sibling reads a row of block 2.
  const kv::RowRef shared[] = {kv::RowAt(seq, 9)};
  EXPECT_EQ(FreeableBlocks(seq, live, 0, shared), (std::vector<size_t>{1}));
  // (b) a block given back in an earlier round is not freed twice.
  const size_t first[] = {2};
  const size_t in_use = pool.bytes_in_use();
  FreeBlocks(first, &seq);
  EXPECT_EQ(pool.bytes_in_use(), in_use - pool.bytes_per_block());
  EXPECT_EQ(FreeableBlocks(seq, live, 0, {}), (std::vector<size_t>{1}));
  // Block 0 and the block new rows go into are never freed, dead or not.
  live.assign(22, 0);
  EXPECT_EQ(FreeableBlocks(seq, live, 0, {}), (std::vector<size_t>{1, 3, 4}));
}

TEST(CompactRows, CopiesKeptRowsToNewPositionsExactlyRotated) {
  model::testing::TempFile file(model::testing::BuildTinyGguf({}, 7));
  auto m = model::Model::Load(file.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::Model& model = **m;
  kv::KvPool pool(model.kv_geometry(4), 32, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  ThreadPool threads(2);
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 18; ++i) tokens.push_back(1 + (i * 7) % 50);
  ASSERT_TRUE(engine::Forward(model, &threads, &seq, tokens, 0, false, &logits, 8).ok());
  const std::vector<int64_t> kept = {0, 1, 5, 6, 7, 13, 17};
  auto packed = CompactRows(seq, kept, model.rope_specs());
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  ASSERT_EQ((*packed)->n_rows(), 7);
  EXPECT_EQ((*packed)->view().list(0, 0).front().first_pos, 0);
  // Rotated back to the old positions, the copies are the originals (within f16 rounding).
  const kv::KvGeometry& g = pool.geometry();
  std::vector<float> k0(g.n_kv_heads * g.head_dim_k), v0(g.n_kv_heads * g.head_dim_v);
  std::vector<float> k1(k0.size()), v1(v0.size());
  for (size_t j = 0; j < kept.size(); ++j) {
    const kv::RowRef r = kv::RowAt(**packed, static_cast<int64_t>(j));
    EXPECT_EQ(pool.rotated_pos(r), static_cast<int64_t>(j));
    pool.Reposition(r, 1, kept[j], model.rope_specs());
    for (int l = 0; l < g.n_layers; ++l) {
      pool.ReadToken(kv::RowAt(seq, kept[j]), l, k0.data(), v0.data());
      pool.ReadToken(r, l, k1.data(), v1.data());
      EXPECT_EQ(v0, v1);
      for (size_t i = 0; i < k0.size(); ++i) {
        EXPECT_NEAR(k1[i], k0[i], 4e-3f * (1 + std::fabs(k0[i]))) << j << " " << l;
      }
    }
  }
}

TEST(QueryMemory, FollowsEquationTwoAndKeepsTheLeastRecentlyUsedOut) {
  QueryMemory m(/*n_layers=*/1, /*n_heads=*/1, /*head_dim=*/2, /*capacity=*/2);
  const float e1[] = {3, 4}, e2[] = {0, 1};
  std::span<const float> r = m.Update(7, e1, 0.5);
  EXPECT_NEAR(r[0], 0.6f, 1e-6f);  // (3, 4) / 5
  EXPECT_NEAR(r[1], 0.8f, 1e-6f);
  r = m.Update(7, e2, 0.5);  // e^-0.5 (0.6, 0.8) + (0, 1), unit norm
  const double a = std::exp(-0.5) * 0.6, b = std::exp(-0.5) * 0.8 + 1, n = std::hypot(a, b);
  EXPECT_NEAR(r[0], a / n, 1e-6);
  EXPECT_NEAR(r[1], b / n, 1e-6);
  m.Update(8, e1, 0.5);
  EXPECT_FALSE(m.Find(7).empty());  // 7 is now the most recent
  m.Update(9, e1, 0.5);             // evicts 8
  EXPECT_TRUE(m.Find(8).empty());
  EXPECT_EQ(m.size(), 2u);
  QueryMemory back(1, 1, 2, 2);
  ASSERT_TRUE(back.FromJson(m.ToJson()).ok());
  EXPECT_EQ(std::vector<float>(back.Find(7).begin(), back.Find(7).end()),
            std::vector<float>(m.Find(7).begin(), m.Find(7).end()));
  for (const nlohmann::json& bad :
       {nlohmann::json(3), nlohmann::json{{"sessions", {{{"key", "zz"}, {"m", "AAAA"}}}}},
        nlohmann::json{{"sessions", {{{"key", "0000000000000007"}, {"m", "AAAA"}}}}}}) {
    EXPECT_EQ(back.FromJson(bad).code(), ErrorCode::kCorrupt) << bad.dump();
  }
}

TEST(RuleScores, MatchEquationThreeComputedByHand) {
  model::testing::TempFile file(model::testing::BuildTinyGguf({}, 5));
  auto m = model::Model::Load(file.path());
  ASSERT_TRUE(m.ok());
  const model::Model& model = **m;
  const model::ModelSpec& spec = model.spec();
  kv::KvPool pool(model.kv_geometry(4), 32, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  ThreadPool threads(2);
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 14; ++i) tokens.push_back(2 + (i * 5) % 40);
  ASSERT_TRUE(engine::Forward(model, &threads, &seq, tokens, 0, false, &logits, 8).ok());
  const std::vector<int64_t> cand = {1, 2, 3, 6, 9, 10, 13};
  std::mt19937 rng(4);
  std::normal_distribution<float> d;
  const int hd = spec.head_dim_k;
  std::vector<float> memory(static_cast<size_t>(spec.n_layers) * spec.n_heads * hd);
  for (float& x : memory) x = d(rng);
  const std::vector<double> got = RuleScores(seq, cand, memory, spec, &threads);
  std::vector<double> want(cand.size(), 0.0);
  const kv::KvGeometry& g = pool.geometry();
  std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
  for (int l = 0; l < spec.n_layers; ++l) {
    for (int h = 0; h < spec.n_heads; ++h) {
      const int kvh = h / (spec.n_heads / spec.n_kv_heads);
      std::vector<double> logit;
      for (int64_t c : cand) {
        pool.ReadToken(kv::RowAt(seq, c), l, k.data(), v.data());
        double dot = 0;
        for (int i = 0; i < hd; ++i)
          dot += double{memory[(l * spec.n_heads + h) * hd + i]} * k[kvh * hd + i];
        logit.push_back(dot / std::sqrt(double(hd)));
      }
      double mx = *std::max_element(logit.begin(), logit.end()), z = 0;
      for (double x : logit) z += std::exp(x - mx);
      for (size_t i = 0; i < cand.size(); ++i) want[i] += std::exp(logit[i] - mx) / z;
    }
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  double total = 0;
  for (double x : got) total += x;
  EXPECT_NEAR(total, spec.n_layers * spec.n_heads, 1e-3);  // each (l, h) softmax sums to 1
}

TEST(TurnSpans, FindTheSystemTheLatestMessageAndTheSession) {
  // A ChatML prompt, one token per piece: system, user task, assistant call, tool output, and
  // the generation prompt.
  const std::vector<std::string> pieces = {
      "<|im_start|>", "system",    "\n", "Be brief.",         "<|im_end|>", "\n",  // 0-5
      "<|im_start|>", "user",      "\n", "Find the code.",    "<|im_end|>", "\n",  // 6-11
      "<|im_start|>", "assistant", "\n", "search()",          "<|im_end|>", "\n",  // 12-17
      "<|im_start|>", "tool",      "\n", "The code is 4721.", "<|im_end|>", "\n",  // 18-23
      "<|im_start|>", "assistant", "\n"};                                          // 24-26
  std::vector<int32_t> ids(pieces.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const auto piece = [&](int32_t id) { return std::string_view(pieces[id]); };
  const TurnSpans s = FindTurnSpans(ids, piece, /*new_from=*/15);
  EXPECT_EQ(s.protect_end, 6);
  EXPECT_EQ(s.action_begin, 18);
  EXPECT_EQ(s.session_begin, 6);
  EXPECT_EQ(s.session_end, 12);
  // The session key reads the first user message only: another tool output keeps it.
  std::vector<int32_t> other = ids;
  other[21] = 3;
  EXPECT_EQ(SessionKey(ids, s), SessionKey(other, FindTurnSpans(other, piece, 15)));
  std::vector<int32_t> task = ids;
  task[9] = 3;
  EXPECT_NE(SessionKey(ids, s), SessionKey(task, FindTurnSpans(task, piece, 15)));
  // Without openers: nothing protected, the new tokens are the actionable span.
  const std::vector<int32_t> plain = {3, 9, 15, 21};
  const TurnSpans p = FindTurnSpans(plain, piece, 2);
  EXPECT_EQ(p.protect_end, 0);
  EXPECT_EQ(p.action_begin, 2);
}

}  // namespace
}  // namespace kvmem::memory
