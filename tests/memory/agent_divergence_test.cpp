// AgentRuntime with requests that diverge from an agent's conversation (on_diverge) and agents
// whose conversation the server keeps, on the tiny random llama and the byte tokenizer (one
// token per byte). The references are independent runs: a fresh agent given the same prompt
// replies token for token as an agent continuing from a checkpoint does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent_runtime_fixture.h"
#include "faulty_fs.h"
#include "memory/agents/agent_runtime.h"

namespace kvmem::memory {
namespace {

class AgentDivergenceTest : public testing::AgentRuntimeFixture {
 protected:
  Result<TurnResult> Run(AgentRuntime& rt, const store::AgentKey& key, const std::string& text,
                         std::string* reply, OnDiverge on_diverge = OnDiverge::kFork,
                         TurnParams p = {}) {
    p.max_tokens = p.max_tokens == 256 ? 5 : p.max_tokens;
    p.sampler.temperature = 0;
    p.on_diverge = on_diverge;
    TurnCallbacks cb;
    reply->clear();
    cb.on_text = [reply](std::string_view s) {
      reply->append(s);
      return true;
    };
    return rt.RunTurn(&key, text, p, cb);
  }
  std::string Held(AgentRuntime& rt, const store::AgentKey& key) {
    auto t = rt.ConversationText(key);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : "";
  }
  std::vector<std::string> Checkpoints(AgentRuntime& rt, const store::AgentKey& key) {
    auto a = rt.Get(key);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    std::vector<std::string> ids;
    if (a.ok()) {
      for (const store::CheckpointInfo& c : a->checkpoints) ids.push_back(c.id);
    }
    return ids;
  }
};

TEST_F(AgentDivergenceTest, ForkKeepsTheConversationAndAResendContinuesIt) {
  auto rt = Runtime();
  std::string r;
  const std::string a1 = "Alice keeps her keys in the blue bowl by the door.";
  ASSERT_TRUE(Run(*rt, ada_, a1, &r).ok());
  const std::string a2 = Held(*rt, ada_) + " Where are the keys?";
  ASSERT_TRUE(Run(*rt, ada_, a2, &r).ok());
  const std::string conversation_a = Held(*rt, ada_);
  const int64_t a_tokens = rt->Get(ada_)->tokens;

  // Another conversation: it shares nothing, so the turn would have dropped A.
  Result<TurnResult> b = Run(*rt, ada_, "Bob never writes anything down.", &r);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->prompt.divergence.diverged);
  EXPECT_EQ(b->prompt.divergence.action, OnDiverge::kFork);
  EXPECT_EQ(b->prompt.divergence.checkpoint, "ckpt-1");
  EXPECT_TRUE(b->prompt.divergence.restored.empty());
  EXPECT_EQ(b->prompt.divergence.held_tokens, a_tokens);
  EXPECT_EQ(b->prompt.cached_tokens, 0);
  EXPECT_EQ(Checkpoints(*rt, ada_), std::vector<std::string>{"ckpt-1"});

  // The client resends A with a new question: the turn continues from the checkpoint, which
  // the new conversation now holds whole (so it goes), and B becomes a checkpoint.
  const std::string a3 = conversation_a + " And the car?";
  std::string continued;
  Result<TurnResult> c = Run(*rt, ada_, a3, &continued);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prompt.divergence.restored, "ckpt-1");
  EXPECT_EQ(c->prompt.divergence.checkpoint, "ckpt-2");
  EXPECT_EQ(c->prompt.tier, Tier::kWarm);
  EXPECT_EQ(c->prompt.cached_tokens, a_tokens);
  EXPECT_EQ(Checkpoints(*rt, ada_), std::vector<std::string>{"ckpt-2"});

  // Independent reference: a fresh agent prefilling the whole prompt replies the same.
  const store::AgentKey fresh{"t", "fresh"};
  std::string cold;
  Result<TurnResult> ref = Run(*rt, fresh, a3, &cold);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->prompt.cached_tokens, 0);
  EXPECT_EQ(continued, cold);

  // A restart keeps the checkpoint: resending B continues from it, warm.
  rt.reset();
  rt = Runtime();
  Result<TurnResult> d = Run(*rt, ada_, "Bob never writes anything down." + r, &r);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->prompt.divergence.restored, "ckpt-2");
  EXPECT_GT(d->prompt.cached_tokens, 20);
}

TEST_F(AgentDivergenceTest, ReplaceDropsItRejectChangesNothing) {
  auto rt = Runtime();
  std::string r;
  ASSERT_TRUE(Run(*rt, ada_, "The meeting moved to Thursday at noon.", &r).ok());
  const std::string held = Held(*rt, ada_);

  Result<TurnResult> rejected = Run(*rt, ada_, "Something else.", &r, OnDiverge::kReject);
  EXPECT_EQ(rejected.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(rejected.status().message().find("reject"), std::string::npos);
  EXPECT_EQ(Held(*rt, ada_), held);
  EXPECT_TRUE(Checkpoints(*rt, ada_).empty());
  // A request that continues the conversation is no divergence, whatever it asks.
  Result<TurnResult> more = Run(*rt, ada_, held + " Noted.", &r, OnDiverge::kReject);
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_FALSE(more->prompt.divergence.diverged);

  Result<TurnResult> replaced = Run(*rt, ada_, "Something else.", &r, OnDiverge::kReplace);
  ASSERT_TRUE(replaced.ok());
  EXPECT_TRUE(replaced->prompt.divergence.diverged);
  EXPECT_EQ(replaced->prompt.divergence.action, OnDiverge::kReplace);
  EXPECT_TRUE(replaced->prompt.divergence.checkpoint.empty());
  EXPECT_TRUE(Checkpoints(*rt, ada_).empty());
  EXPECT_TRUE(Held(*rt, ada_).starts_with("Something else."));
}

TEST_F(AgentDivergenceTest, AForkWhoseTurnChangesNothingLeavesNoCheckpoint) {
  auto rt = Runtime();
  std::string r;
  ASSERT_TRUE(Run(*rt, ada_, "The meeting moved to Thursday at noon.", &r).ok());
  const std::string held = Held(*rt, ada_);
  // Longer than the 512-token context: refused after the fork.
  EXPECT_EQ(Run(*rt, ada_, std::string(600, 'x'), &r).status().code(), ErrorCode::kOutOfRange);
  EXPECT_TRUE(Checkpoints(*rt, ada_).empty());
  // The client leaves at the first piece: the turn is cancelled and not remembered.
  TurnParams p;
  p.max_tokens = 5;
  p.sampler.temperature = 0;
  TurnCallbacks gone;
  gone.on_text = [](std::string_view) { return false; };
  Result<TurnResult> cancelled = rt->RunTurn(&ada_, "Another topic.", p, gone);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->end, TurnEnd::kCancelled);
  EXPECT_TRUE(Checkpoints(*rt, ada_).empty());
  EXPECT_EQ(Held(*rt, ada_), held);
}

TEST_F(AgentDivergenceTest, AFailedReadNeverDeletesTheConversationOrItsCheckpoints) {
  std::string held;
  {
    auto rt = Runtime();
    std::string r;
    ASSERT_TRUE(Run(*rt, ada_, "First conversation, kept.", &r).ok());
    ASSERT_TRUE(Run(*rt, ada_, "Second conversation.", &r).ok());  // the first: a checkpoint
    held = Held(*rt, ada_);
  }
  // The same store, reopened over a file system whose reads fail (EIO) while the agent loads.
  store_.reset();
  store::testing::FaultyFs fs;
  store::StoreOptions o{dir_.path(), std::string(32, 'a'), 257};
  o.file_ops = &fs;
  auto reopened = store::AgentStore::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_.emplace(std::move(*reopened));
  auto rt = Runtime();
  // Read 1: the manifest's memory record (a failure there is taken as an unknown policy); 2: the
  // manifest Load reads.
  fs.FailNth(2, store::testing::FsCall::kRead);
  std::string r;
  const Result<TurnResult> failed = Run(*rt, ada_, held + " More.", &r);
  ASSERT_TRUE(fs.fired());
  EXPECT_EQ(failed.status().code(), ErrorCode::kIo);
  EXPECT_TRUE(store_->Contains(ada_));
  fs.FailNth(0);
  const Result<TurnResult> again = Run(*rt, ada_, held + " More.", &r);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->prompt.tier, Tier::kWarm);
  EXPECT_EQ(Checkpoints(*rt, ada_), std::vector<std::string>{"ckpt-1"});
}

TEST_F(AgentDivergenceTest, TheBudgetBoundsCheckpointsAndZeroKeepsNone) {
  auto rt = Runtime();
  MemorySpec spec = rt->default_memory();
  spec.max_checkpoints = 2;
  ASSERT_TRUE(rt->CreateAgent(ada_, spec).ok());
  std::string r;
  for (const char* text : {"one one one", "two two two", "three three", "four four"}) {
    ASSERT_TRUE(Run(*rt, ada_, text, &r).ok());
  }
  EXPECT_EQ(Checkpoints(*rt, ada_), (std::vector<std::string>{"ckpt-2", "ckpt-3"}));
  EXPECT_EQ(rt->Get(ada_)->max_checkpoints, 2);

  const store::AgentKey none{"t", "none"};
  spec.max_checkpoints = 0;
  ASSERT_TRUE(rt->CreateAgent(none, spec).ok());
  ASSERT_TRUE(Run(*rt, none, "first", &r).ok());
  Result<TurnResult> t = Run(*rt, none, "second", &r);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->prompt.divergence.action, OnDiverge::kReplace);  // nothing could keep it
  EXPECT_TRUE(Checkpoints(*rt, none).empty());
}

TEST_F(AgentDivergenceTest, PoliciesThatAppendNewPromptsNeverDiverge) {
  auto rt = Runtime();
  Result<MemorySpec> memart = rt->ValidateMemory("memart", Json::object());
  ASSERT_TRUE(memart.ok()) << memart.status().ToString();
  ASSERT_TRUE(rt->CreateAgent(ada_, *memart).ok());
  std::string r;
  ASSERT_TRUE(Run(*rt, ada_, "The first session says many things.", &r).ok());
  Result<TurnResult> t = Run(*rt, ada_, "Only the new question?", &r, OnDiverge::kReject);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->prompt.divergence.diverged);
}

TEST_F(AgentDivergenceTest, AServerSideConversationIsContinuedWithWhatEachTurnAdds) {
  auto rt = Runtime();
  MemorySpec spec = rt->default_memory();
  spec.server_conversation = true;
  ASSERT_TRUE(rt->CreateAgent(ada_, spec).ok());
  std::vector<std::string> seen;
  const auto params = [&seen](std::string added) {
    TurnParams p;
    p.continue_conversation = [&seen, added](std::string_view held) -> Result<std::string> {
      seen.emplace_back(held);
      return std::string(held) + added;
    };
    return p;
  };
  std::string r1, r2;
  // prompt_text is not what the turn reads: the composed conversation is.
  Result<TurnResult> t1 = Run(*rt, ada_, "ignored", &r1, OnDiverge::kFork, params("Hi, I am Ada."));
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], "");
  // The whole reply is held, its last token included (the turn ended by length).
  EXPECT_EQ(t1->choices[0].end, TurnEnd::kLength);
  EXPECT_EQ(Held(*rt, ada_), "Hi, I am Ada." + r1);

  Result<TurnResult> t2 = Run(*rt, ada_, "ignored", &r2, OnDiverge::kFork, params(" Who am I?"));
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(seen.back(), "Hi, I am Ada." + r1);
  EXPECT_EQ(t2->prompt.cached_tokens, 1 + static_cast<int64_t>(seen.back().size()));
  EXPECT_FALSE(t2->prompt.divergence.diverged);
  EXPECT_TRUE(rt->Get(ada_)->server_conversation);

  // The same conversation sent whole by a client to a plain agent replies the same.
  const store::AgentKey plain{"t", "plain"};
  std::string p1, p2;
  ASSERT_TRUE(Run(*rt, plain, "Hi, I am Ada.", &p1).ok());
  ASSERT_EQ(p1, r1);
  ASSERT_TRUE(Run(*rt, plain, "Hi, I am Ada." + p1 + " Who am I?", &p2).ok());
  EXPECT_EQ(p2, r2);
}

}  // namespace
}  // namespace kvmem::memory
