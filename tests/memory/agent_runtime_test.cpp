// AgentRuntime on a tiny random llama and a byte-level tokenizer (one token per byte, so token
// counts are byte counts): a turn that extends the conversation reuses every cached row and
// replies as a cold run of the whole prompt would; DIVERGE keeps the matching prefix; an agent
// evicted from RAM comes back warm from the store; anonymous turns keep nothing; Delete forgets.
#include "memory/agents/agent_runtime.h"

#include <gtest/gtest.h>

#include <string>

#include "agent_runtime_fixture.h"

namespace kvmem::memory {
namespace {

using AgentRuntimeTest = testing::AgentRuntimeFixture;

TEST_F(AgentRuntimeTest, ExtendReusesEveryRowAndRepliesAsAColdRun) {
  auto rt = Runtime();
  std::string r1, r2, cold;
  const std::string t1 = "The quick brown fox.";
  const TurnResult a = Turn(*rt, &ada_, t1, &r1);
  EXPECT_EQ(a.prompt.tier, Tier::kMiss);
  EXPECT_EQ(a.prompt.cached_tokens, 0);
  EXPECT_EQ(a.prompt.prompt_tokens, 1 + static_cast<int64_t>(t1.size()));  // BOS + bytes
  // The cache holds the prompt and every reply token but the last sampled one.
  EXPECT_EQ(a.kv_tokens, a.prompt.prompt_tokens + a.completion_tokens - 1);

  const std::string t2 = t1 + r1 + " Then it slept.";
  const TurnResult b = Turn(*rt, &ada_, t2, &r2);
  EXPECT_EQ(b.prompt.tier, Tier::kHot);
  EXPECT_EQ(b.prompt.match, store::PrefixMatchKind::kExtend);
  EXPECT_EQ(b.prompt.cached_tokens, a.kv_tokens);
  EXPECT_EQ(b.prompt.prompt_tokens, 1 + static_cast<int64_t>(t2.size()));

  // An anonymous turn prefills everything and keeps nothing.
  const TurnResult c = Turn(*rt, nullptr, t2, &cold);
  EXPECT_EQ(c.prompt.cached_tokens, 0);
  EXPECT_EQ(cold, r2);
  auto listed = rt->List("t");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key.id, "ada");
}

TEST_F(AgentRuntimeTest, ExactRecomputesOnlyTheLastTokenAndDivergeKeepsThePrefix) {
  auto rt = Runtime();
  std::string r;
  const std::string t = "Alpha beta gamma delta epsilon zeta eta theta.";
  Turn(*rt, &ada_, t, &r, /*max_tokens=*/1);  // nothing of the reply is fed back
  const TurnResult exact = Turn(*rt, &ada_, t, &r, 1);
  EXPECT_EQ(exact.prompt.match, store::PrefixMatchKind::kExact);
  EXPECT_EQ(exact.prompt.cached_tokens, exact.prompt.prompt_tokens - 1);
  // 90% of the stored text matches: keep it.
  const std::string diverged = t.substr(0, 42) + "XYZ";
  const TurnResult d = Turn(*rt, &ada_, diverged, &r, 1);
  EXPECT_EQ(d.prompt.match, store::PrefixMatchKind::kDiverge);
  EXPECT_EQ(d.prompt.cached_tokens, 1 + 42);
  // Under the 80% threshold the cache is discarded.
  const TurnResult far = Turn(*rt, &ada_, t.substr(0, 5) + "!", &r, 1);
  EXPECT_EQ(far.prompt.cached_tokens, 0);
}

TEST_F(AgentRuntimeTest, EvictedAgentComesBackWarmFromTheStore) {
  auto rt = Runtime(/*hot_budget=*/1);  // every idle agent but the last one leaves RAM
  const store::AgentKey bob{"t", "bob"};
  std::string r1, r2;
  const std::string t = "Remember the number forty-two.";
  const TurnResult a = Turn(*rt, &ada_, t, &r1);
  Turn(*rt, &bob, "Something else entirely.", &r2);
  auto ada = rt->Get(ada_);
  ASSERT_TRUE(ada.ok());
  EXPECT_EQ(ada->tier, Tier::kWarm);
  const TurnResult again = Turn(*rt, &ada_, t + r1 + " And?", &r2);
  EXPECT_EQ(again.prompt.tier, Tier::kWarm);
  EXPECT_EQ(again.prompt.cached_tokens, a.kv_tokens);

  // A new runtime (a restarted process) finds it in the store too.
  auto fresh = Runtime();
  const TurnResult restarted = Turn(*fresh, &ada_, t + r1 + " And?" + r2 + " So?", &r1);
  EXPECT_EQ(restarted.prompt.tier, Tier::kWarm);
  EXPECT_EQ(restarted.prompt.cached_tokens, again.kv_tokens);
}

TEST_F(AgentRuntimeTest, DeleteForgetsAndBadKeysAreRefused) {
  auto rt = Runtime();
  std::string r;
  Turn(*rt, &ada_, "Hello there.", &r);
  EXPECT_TRUE(rt->Delete(ada_).ok());
  EXPECT_EQ(rt->Get(ada_).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(rt->Delete(ada_).code(), ErrorCode::kNotFound);
  EXPECT_FALSE(store_->Contains(ada_));
  const TurnResult again = Turn(*rt, &ada_, "Hello there.", &r);
  EXPECT_EQ(again.prompt.cached_tokens, 0);

  const store::AgentKey bad{"t", std::string(300, 'x')};
  TurnParams p;
  EXPECT_EQ(rt->RunTurn(&bad, "hi", p, {}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->RunTurn(&ada_, std::string(600, 'a'), p, {}).status().code(),
            ErrorCode::kOutOfRange);  // longer than the 512-token context
}

}  // namespace
}  // namespace kvmem::memory
