// KEEP's segments (memory/segments/) against independent references on a tiny random model:
// recomputing every segment token answers exactly as a plain prefill of the same tokens; a
// joint cache reused without recomputation does too, separate caches do not; the multi-hop
// selection follows a chain a single hop misses (the paper's Figure 6, by hand); the schedules
// keep their mean; groups turn static after t quiet steps and dynamic on a write; a restored
// memory answers as the one it was saved from.
#include "memory/segments/keep_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "../model/tiny_model.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "kv/kv_pool.h"
#include "memory/segments/blend.h"
#include "memory/segments/importance.h"
#include "memory/segments/segment_rows.h"
#include "model/model.h"

namespace kvmem::memory::segments {
namespace {

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(Importance, MultiHopFollowsTheChainASingleHopMisses) {
  // Segments: 0 table, 1 key, 2 door, 3 sofa, 4 lamp (10 tokens each). The query looks at the
  // door; the door at the key; the key at the table; the sofa and the lamp at the door. A budget
  // of 3 segments.
  LayerImportance in;
  in.tokens = {10, 10, 10, 10, 10};
  in.query = {0.01, 0.02, 0.30, 0.05, 0.04};
  in.cross.assign(5, std::vector<double>(5, 0.0));
  in.cross[2][1] = 0.6;  // door -> key
  in.cross[1][0] = 0.7;  // key -> table
  in.cross[3][2] = 0.2;  // sofa -> door
  in.cross[4][2] = 0.1;  // lamp -> door
  EXPECT_EQ(SingleHopSelect(in, 30), (std::vector<int>{2, 3, 4}));
  // The paper's rounds, R alone: {door, sofa, lamp} -> table 0, key .2, door .1, sofa 0,
  // lamp 0 -> {table, key, door} (ties to the lower index). Then table .7/3, key .2, door 0 ->
  // {table, key, door} again.
  int hops = 0;
  EXPECT_EQ(MultiHopSelect(in, 30, kMaxHops, &hops), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hops, 2);
  // With the query a source: {door, sofa, lamp} -> table .0025, key .155, door .15, sofa .0125,
  // lamp .01 -> {key, door, sofa}; then table (.01 + .7) / 4, key .155, door .125 ->
  // {table, key, door}; then the same set.
  EXPECT_EQ(MultiHopSelect(in, 30, kMaxHops, &hops, true), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hops, 3);
  // Debiased (attention above each segment's mean over the sources that can see it: table
  // .175, key .2, door .15, sofa 0): {door, sofa, lamp} -> key .4 / 3, door .05 / 3, the rest 0
  // -> {table, key, door} (ties to the lower index); then table .525 / 3, key .4 / 3, door 0.
  EXPECT_EQ(MultiHopSelect(in, 30, kMaxHops, &hops, false, true), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hops, 2);
  // A sink every source pays alike (here the table, which all four later segments see) changes
  // nothing debiased, however strong.
  LayerImportance sink = in;
  for (int a = 1; a < 5; ++a) sink.cross[a][0] += 0.3;
  EXPECT_EQ(MultiHopSelect(sink, 30, kMaxHops, nullptr, false, true),
            MultiHopSelect(in, 30, kMaxHops, nullptr, false, true));
  for (int a = 1; a < 5; ++a) sink.cross[a][0] += 5.0;
  EXPECT_EQ(MultiHopSelect(sink, 30, kMaxHops, nullptr, false, true),
            MultiHopSelect(in, 30, kMaxHops, nullptr, false, true));
  EXPECT_TRUE(TopByTokens(in.query, in.tokens, 0).empty());
  // A budget smaller than any segment still keeps the best one.
  EXPECT_EQ(TopByTokens(in.query, in.tokens, 5), (std::vector<int>{2}));
}

TEST(Importance, SchedulesStartFullAndKeepTheirMean) {
  for (double avg : {0.1, 0.15, 0.3, 0.6}) {
    for (const auto& r : {RecomputeRatios(30, avg), FixedRecomputeRatios(30, avg)}) {
      ASSERT_EQ(r.size(), 30u);
      EXPECT_EQ(r[0], 1.0);
      EXPECT_NEAR(std::accumulate(r.begin(), r.end(), 0.0) / 30, avg, 1e-9);
    }
    const auto r = RecomputeRatios(30, avg);
    for (int i = 2; i < 30; ++i) EXPECT_LE(r[i], r[i - 1] + 1e-12);
  }
  EXPECT_EQ(RecomputeRatios(4, 0.01), (std::vector<double>{1, 0, 0, 0}));
}

class KeepTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model::testing::TinyConfig c;
    c.arch = GetParam();
    c.n_layers = 4;  // choices after layers 0, 1 and 2
    file_ = std::make_unique<model::testing::TempFile>(model::testing::BuildTinyGguf(c, 7));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(16), 512);
    const int v = model_->spec().n_vocab;
    prefix_ = {1, 5, 9};
    for (int s = 0; s < 4; ++s) {
      std::vector<int32_t> t;
      for (int i = 0; i < 6 + s; ++i) t.push_back((s * 31 + i * 7 + 2) % v);
      segs_.push_back(t);
    }
    query_ = {4, 8, 15, 16};
  }

  // logits of a plain prefill of prefix, the segments in `order`, and the query.
  std::vector<float> Plain(const std::vector<int>& order) {
    std::vector<int32_t> all = prefix_;
    for (int s : order) all.insert(all.end(), segs_[s].begin(), segs_[s].end());
    all.insert(all.end(), query_.begin(), query_.end());
    kv::KvSequence seq(pool_.get());
    std::vector<float> logits;
    EXPECT_TRUE(engine::Forward(*model_, &threads_, &seq, all, 0, false, &logits, 8).ok());
    return logits;
  }

  std::unique_ptr<kv::KvSequence> Prefix() {
    auto p = std::make_unique<kv::KvSequence>(pool_.get());
    p->set_window_release(false);
    std::vector<float> unused;
    EXPECT_TRUE(engine::Forward(*model_, &threads_, p.get(), prefix_, 0, false, &unused).ok());
    return p;
  }

  std::unique_ptr<model::testing::TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  std::vector<int32_t> prefix_, query_;
  std::vector<std::vector<int32_t>> segs_;
};

TEST_P(KeepTest, BlendRecomputingEverythingIsAPlainPrefill) {
  auto prefix = Prefix();
  std::vector<std::unique_ptr<kv::KvSequence>> caches;
  std::vector<PlacedSegment> placed;
  for (const auto& t : segs_) {
    auto c = EncodeAfter(*model_, &threads_, *prefix, 3, t);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    caches.push_back(std::move(*c));
    placed.push_back({caches.back().get(), 0, t});
  }
  const std::vector<float> plain = Plain({0, 1, 2, 3});
  for (RecomputeRule rule :
       {RecomputeRule::kMultiHop, RecomputeRule::kSingleHop, RecomputeRule::kKvDeviation}) {
    BlendOptions o;
    o.rule = rule;
    o.ratio = 1.0;
    auto r = Blend(*model_, &threads_, *prefix, 3, placed, query_, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_LT(MaxAbsDiff(plain, r->logits), 2e-4f) << RecomputeRuleName(rule);
    EXPECT_NEAR(r->stats.computed_share(), 1.0, 1e-12);
  }
  // Separate caches without recomputation miss the cross-attention.
  BlendOptions none;
  none.rule = RecomputeRule::kNone;
  auto r = Blend(*model_, &threads_, *prefix, 3, placed, query_, none);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(MaxAbsDiff(plain, r->logits), 1e-3f);
  // A partial ratio computes its share, between the two.
  BlendOptions some;
  some.ratio = 0.4;
  r = Blend(*model_, &threads_, *prefix, 3, placed, query_, some);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->stats.computed_share(), 0.4, 0.15);
  EXPECT_LT(r->stats.computed_share(), 0.99);
}

TEST_P(KeepTest, AJointCacheReusedAsItIsIsAPlainPrefill) {
  auto prefix = Prefix();
  std::vector<int32_t> joint;
  for (const auto& t : segs_) joint.insert(joint.end(), t.begin(), t.end());
  auto c = EncodeAfter(*model_, &threads_, *prefix, 3, joint);
  ASSERT_TRUE(c.ok());
  std::vector<PlacedSegment> placed;
  int64_t first = 0;
  for (const auto& t : segs_) {
    placed.push_back({c->get(), first, t});
    first += static_cast<int64_t>(t.size());
  }
  BlendOptions none;
  none.rule = RecomputeRule::kNone;
  auto r = Blend(*model_, &threads_, *prefix, 3, placed, query_, none);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(MaxAbsDiff(Plain({0, 1, 2, 3}), r->logits), 2e-4f);
  // Any share recomputed over exact rows is exact too: the rows each layer does not recompute
  // are placed just before it runs, and only those.
  for (RecomputeRule rule : {RecomputeRule::kMultiHop, RecomputeRule::kKvDeviation}) {
    BlendOptions part;
    part.rule = rule;
    part.ratio = 0.3;
    r = Blend(*model_, &threads_, *prefix, 3, placed, query_, part);
    ASSERT_TRUE(r.ok());
    EXPECT_LT(r->stats.computed_share(), 0.99) << RecomputeRuleName(rule);
    EXPECT_LT(MaxAbsDiff(Plain({0, 1, 2, 3}), r->logits), 2e-4f) << RecomputeRuleName(rule);
  }
  // Placed in another order, keys re-rotated: ratio 1 recomputes it exactly.
  std::swap(placed[0], placed[2]);
  BlendOptions all;
  all.ratio = 1.0;
  r = Blend(*model_, &threads_, *prefix, 3, placed, query_, all);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(MaxAbsDiff(Plain({2, 1, 0, 3}), r->logits), 2e-4f);
}

TEST_P(KeepTest, GroupsTurnStaticWhenQuietAndDynamicOnAWrite) {
  KeepConfig config;
  config.static_after = 2;
  config.group_size = 2;
  config.recompute_ratio = 1.0;
  KeepMemory m(*model_, &threads_, pool_.get(), config);
  ASSERT_TRUE(m.SetPrefix(prefix_).ok());
  // Two clear clusters: segments 0, 1 along x, 2, 3 along y.
  const std::vector<std::vector<float>> emb = {{1, 0}, {0.99f, 0.14f}, {0, 1}, {0.14f, 0.99f}};
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(m.Put("s" + std::to_string(s), "text", segs_[s], emb[s]).ok());
  }
  EXPECT_EQ(m.TakeEncoded().tokens, 6 + 7 + 8 + 9);
  const std::vector<float> plain = Plain({0, 1, 2, 3});
  auto answer = [&] {
    auto r = m.Answer(query_, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_LT(MaxAbsDiff(plain, r->logits), 2e-4f);
    m.EndStep();
  };
  answer();  // step 0: everything just changed
  auto list = m.List();
  EXPECT_EQ(list[0].group, list[1].group);
  EXPECT_EQ(list[2].group, list[3].group);
  EXPECT_NE(list[0].group, list[2].group);
  EXPECT_FALSE(list[0].is_static);
  answer();  // step 1
  EXPECT_EQ(m.TakeEncoded().tokens, 0);
  // Step 2 begins: quiet for 2 steps, both groups are computed jointly (here, between steps).
  ASSERT_TRUE(m.Refresh().ok());
  EXPECT_EQ(m.TakeEncoded().tokens, 30);
  EXPECT_TRUE(m.Find("s0")->is_static && m.Find("s3")->is_static);
  answer();  // step 2: nothing more to compute
  EXPECT_EQ(m.TakeEncoded().tokens, 0);
  // A write to s1: its group goes dynamic, s0 gets a cache of its own.
  ASSERT_TRUE(m.Put("s1", "text", segs_[1], emb[1]).ok());
  EXPECT_EQ(m.TakeEncoded().tokens, 7 + 6);
  EXPECT_FALSE(m.Find("s0")->is_static);
  EXPECT_TRUE(m.Find("s2")->is_static);
  answer();
  ASSERT_TRUE(m.Remove("s2").ok());
  EXPECT_FALSE(m.Find("s3")->is_static);
  EXPECT_EQ(m.Remove("s2").code(), ErrorCode::kNotFound);
  EXPECT_EQ(m.size(), 3u);
}

TEST_P(KeepTest, CachesArePackedAndDeadRowsCompacted) {
  KeepConfig config;
  config.static_dynamic = false;
  config.recompute_ratio = 1.0;
  KeepMemory m(*model_, &threads_, pool_.get(), config);
  ASSERT_TRUE(m.SetPrefix(prefix_).ok());
  const int before = pool_->blocks_in_use();  // the prefix
  // 40 segments of 6-9 tokens: 300 rows, 19 blocks of 16 packed (40 blocks one per cache).
  int64_t rows = 0;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(m.Put("s" + std::to_string(i), "", segs_[i % 4], {}).ok());
    rows += static_cast<int64_t>(segs_[i % 4].size());
  }
  EXPECT_LE(pool_->blocks_in_use() - before, (rows + 15) / 16 + 1);
  // Each segment rewritten three times: dead rows are dropped once they outnumber the live.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE(m.Put("s" + std::to_string(i), "", segs_[(i + round + 1) % 4], {}).ok());
  }
  EXPECT_LE(pool_->blocks_in_use() - before, (3 * rows + 16) / 16 + 2);
  // And the caches still read right: everything recomputed is the plain prefill.
  for (int i = 4; i < 40; ++i) ASSERT_TRUE(m.Remove("s" + std::to_string(i)).ok());
  auto r = m.Answer(query_, {});
  ASSERT_TRUE(r.ok());
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back((i + 3) % 4);
  EXPECT_LT(MaxAbsDiff(Plain(order), r->logits), 2e-4f);
}

TEST_P(KeepTest, TopKReadsTheNearestUnitsInMemoryOrder) {
  KeepConfig config;
  config.top_k = 2;
  config.static_dynamic = false;
  config.recompute_ratio = 1.0;
  KeepMemory m(*model_, &threads_, pool_.get(), config);
  ASSERT_TRUE(m.SetPrefix(prefix_).ok());
  const std::vector<std::vector<float>> emb = {{1, 0}, {0, 1}, {0.6f, 0.8f}, {0.8f, 0.6f}};
  for (int s = 0; s < 4; ++s)
    ASSERT_TRUE(m.Put("s" + std::to_string(s), "", segs_[s], emb[s]).ok());
  const std::vector<float> q = {0, 1};
  auto r = m.Answer(query_, q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(m.last_read(), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_LT(MaxAbsDiff(Plain({1, 2}), r->logits), 2e-4f);
}

TEST_P(KeepTest, ARestoredMemoryAnswersAsTheSavedOne) {
  KeepConfig config;
  config.static_after = 1;
  config.group_size = 2;
  config.recompute_ratio = 0.5;
  KeepMemory m(*model_, &threads_, pool_.get(), config);
  ASSERT_TRUE(m.SetPrefix(prefix_).ok());
  const std::vector<std::vector<float>> emb = {{1, 0}, {0.99f, 0.14f}, {0, 1}, {0.14f, 0.99f}};
  for (int s = 0; s < 4; ++s)
    ASSERT_TRUE(m.Put("s" + std::to_string(s), "t", segs_[s], emb[s]).ok());
  ASSERT_TRUE(m.Answer(query_, {}).ok());
  m.EndStep();
  ASSERT_TRUE(m.Put("s3", "t3", segs_[3], emb[3]).ok());  // one group static, one dynamic
  auto before = m.Answer(query_, {});
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(m.Find("s0")->is_static);
  EXPECT_FALSE(m.Find("s2")->is_static);

  auto saved = m.Persist();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  auto back = KeepMemory::Restore(*model_, &threads_, pool_.get(), config, std::move(saved->rows),
                                  saved->tokens, saved->state);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->step(), 1);
  auto after = (*back)->Answer(query_, {});
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*back)->TakeEncoded().tokens, 0);  // nothing recomputed on the way back
  EXPECT_LT(MaxAbsDiff(before->logits, after->logits), 1e-5f);
  EXPECT_EQ((*back)->Find("s3")->text, "t3");

  // A state whose unit does not spell its segment's tokens is refused.
  auto again = m.Persist();
  ASSERT_TRUE(again.ok());
  again->tokens.back() = (again->tokens.back() + 1) % model_->spec().n_vocab;
  auto bad = KeepMemory::Restore(*model_, &threads_, pool_.get(), config, std::move(again->rows),
                                 again->tokens, again->state);
  EXPECT_EQ(bad.status().code(), ErrorCode::kCorrupt);
}

INSTANTIATE_TEST_SUITE_P(Archs, KeepTest, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace kvmem::memory::segments
