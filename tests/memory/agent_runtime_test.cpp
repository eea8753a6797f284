// AgentRuntime on a tiny random llama and a byte-level tokenizer (one token per byte, so token
// counts are byte counts): a turn that extends the conversation reuses every cached row and
// replies as a cold run of the whole prompt would; DIVERGE keeps the matching prefix; an agent
// evicted from RAM comes back warm from the store; anonymous turns keep nothing; Delete forgets.
#include "memory/agents/agent_runtime.h"

#include <gtest/gtest.h>

#include <string>

#include "../model/tiny_model.h"
#include "../tokenizer/byte_tokenizer.h"
#include "test_util.h"

namespace kvmem::memory {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

class AgentRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TinyConfig c;
    c.n_vocab = 257;  // the byte tokenizer's ids
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 3));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto s = store::AgentStore::Open({dir_.path(), std::string(32, 'a'), 257});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_.emplace(std::move(*s));
  }

  std::unique_ptr<AgentRuntime> Runtime(size_t hot_budget = size_t{1} << 30) {
    AgentRuntimeOptions o;
    o.formats = {kv::KvFormat::kF16, kv::KvFormat::kF16};  // head_dim 8: no 32-value blocks
    o.block_rows = 8;
    o.n_ctx = 512;
    o.max_batch = 16;
    o.hot_budget_bytes = hot_budget;
    return std::make_unique<AgentRuntime>(*model_, tok_, &threads_, &*store_, o);
  }

  // A greedy turn; the reply text goes to *reply.
  TurnResult Turn(AgentRuntime& rt, const store::AgentKey* key, const std::string& text,
                  std::string* reply, int max_tokens = 6) {
    TurnParams p;
    p.max_tokens = max_tokens;
    p.sampler.temperature = 0;
    TurnCallbacks cb;
    reply->clear();
    cb.on_text = [reply](std::string_view s) {
      reply->append(s);
      return true;
    };
    auto r = rt.RunTurn(key, text, p, cb);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : TurnResult{};
  }

  store::testing::TempDir dir_;
  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  tokenizer::Tokenizer tok_ = tokenizer::testing::ByteTokenizer();
  ThreadPool threads_{2};
  std::optional<store::AgentStore> store_;
  const store::AgentKey ada_{"t", "ada"};
};

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

  const store::AgentKey bad{"t", "../x"};
  TurnParams p;
  EXPECT_EQ(rt->RunTurn(&bad, "hi", p, {}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->RunTurn(&ada_, std::string(600, 'a'), p, {}).status().code(),
            ErrorCode::kOutOfRange);  // longer than the 512-token context
}

}  // namespace
}  // namespace kvmem::memory
