// The `intentkv` policy through the agent runtime (the tiny model, the byte tokenizer): every
// scorer and layout prunes to its budget and a restarted runtime answers as the live one; dead
// slots keep the next prompt's prefix cached while compaction loses it; blocks of dead rows give
// their storage back.
#include <gtest/gtest.h>

#include <string>

#include "agent_runtime_fixture.h"

namespace kvmem::memory {
namespace {

class IntentPolicyTest : public testing::AgentRuntimeFixture {
 protected:
  static Json Config(const std::string& scorer, const std::string& layout, int budget = 12) {
    return Json{{"budget", budget}, {"scorer", scorer}, {"layout", layout}};
  }
};

const std::string kTurns[] = {
    "Ada keeps a red notebook in the top drawer of her desk at home.",
    " She also owns a green bicycle with a bell and a basket.",
    " On Sundays she rides it to the market by the river.",
    " Where is the notebook?",
};

TEST_F(IntentPolicyTest, EveryScorerAndLayoutPrunesAndRestartsAsTheLiveRuntime) {
  for (const std::string scorer : {"intentkv", "query", "streaming", "snapkv", "h2o"}) {
    for (const std::string layout : {"dead_slot", "compact"}) {
      SCOPED_TRACE(scorer + "/" + layout);
      store::testing::TempDir dir;
      auto s = store::AgentStore::Open({dir.path(), std::string(32, 'a'), 257});
      ASSERT_TRUE(s.ok());
      store_.emplace(std::move(*s));
      auto live = Runtime();
      auto spec = live->ValidateMemory("intentkv", Config(scorer, layout));
      ASSERT_TRUE(spec.ok()) << spec.status().ToString();
      ASSERT_TRUE(live->CreateAgent(ada_, *spec).ok());
      std::string prompt, reply;
      for (int t = 0; t < 3; ++t) {
        prompt += kTurns[t];
        const TurnResult r = Turn(*live, &ada_, prompt, &reply);
        prompt += reply;
        if (t > 0) {  // the history passed the budget: rows were dropped, the budget holds
          EXPECT_GT(r.memory_report["dropped_rows"].get<int64_t>(), 0);
          EXPECT_LE(r.memory_report["live_rows"].get<int64_t>(),
                    std::max<int64_t>(12, r.memory_report["forced_rows"].get<int64_t>()) + 1);
        }
      }
      auto restarted = Runtime();
      prompt += kTurns[3];
      std::string warm_reply, hot_reply;
      const TurnResult warm = Turn(*restarted, &ada_, prompt, &warm_reply);
      const TurnResult hot = Turn(*live, &ada_, prompt, &hot_reply);
      EXPECT_EQ(warm_reply, hot_reply);
      EXPECT_EQ(warm.prompt.cached_tokens, hot.prompt.cached_tokens);
      EXPECT_EQ(warm.memory_report, hot.memory_report);
    }
  }
}

TEST_F(IntentPolicyTest, DeadSlotsKeepThePrefixCachedCompactionLosesIt) {
  for (const std::string layout : {"dead_slot", "compact"}) {
    SCOPED_TRACE(layout);
    auto rt = Runtime();
    const store::AgentKey key{"t", "agent-" + layout};
    auto spec = rt->ValidateMemory("intentkv", Config("intentkv", layout));
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(rt->CreateAgent(key, *spec).ok());
    std::string prompt, reply;
    int64_t rows_before = 0, cached = 0, resent = 0;
    for (int t = 0; t < 4; ++t) {
      prompt += kTurns[t];
      const TurnResult r = Turn(*rt, &key, prompt, &reply);
      if (t > 0) {
        cached += r.prompt.cached_tokens;
        resent += rows_before;
        if (layout == "dead_slot") {  // everything the cache held is reused
          EXPECT_EQ(r.prompt.cached_tokens, rows_before);
        }
        // The client resends what it sent and got back: no divergence, whatever was dropped.
        EXPECT_FALSE(r.prompt.divergence.diverged);
      }
      prompt += reply;
      rows_before = rt->Get(key)->tokens;
    }
    if (layout == "compact") {
      EXPECT_LT(cached, resent / 2);  // a compacted cache matches only up to its first drop
    }
    EXPECT_TRUE(rt->Get(key)->checkpoints.empty());
  }
}

TEST_F(IntentPolicyTest, BlocksOfDeadRowsGoBackToThePool) {
  auto rt = Runtime();
  auto spec = rt->ValidateMemory("intentkv", Config("streaming", "dead_slot", 8));
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(rt->CreateAgent(ada_, *spec).ok());
  std::string prompt, reply;
  int64_t freed = 0;
  for (int t = 0; t < 4; ++t) {
    prompt += kTurns[t];
    const TurnResult r = Turn(*rt, &ada_, prompt, &reply);
    prompt += reply;
    freed += r.memory_report.value("freed_blocks", int64_t{0});
  }
  // Streaming drops the middle: whole blocks of 8 dead rows there are given back.
  EXPECT_GT(freed, 0);
  const int64_t rows = rt->Get(ada_)->tokens;
  const int64_t bytes = rt->Get(ada_)->bytes;
  const size_t per_row = model_->kv_geometry(8).n_layers * model_->kv_geometry(8).n_kv_heads *
                         (model_->kv_geometry(8).head_dim_k + model_->kv_geometry(8).head_dim_v) *
                         sizeof(uint16_t);
  EXPECT_LT(bytes, static_cast<int64_t>(((rows + 7) / 8) * 8 * per_row));
}

}  // namespace
}  // namespace kvmem::memory
