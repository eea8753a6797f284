// Retrieval agents (memory_mode.h) on the tiny llama with the byte tokenizer (token t >= 1 spells
// byte t - 1 of the conversation, token 0 is the BOS): a turn prefills only what its prompt adds,
// reads the always-kept newest partial block plus top_k blocks per layer (counted by hand from
// the history length), reports blocks whose text is that of their tokens, keeps answering once
// its history is several contexts long, and after a restart retrieves and replies exactly as the
// runtime that never stopped.
#include <gtest/gtest.h>

#include <string>

#include "agent_runtime_fixture.h"

namespace kvmem::memory {
namespace {

class AgentRetrievalTest : public testing::AgentRuntimeFixture {
 protected:
  // Two turns with `memory`; then a runtime restarted on the store and the live one answer a
  // third alike: same blocks, rows and reply.
  void ExpectRestartRetrievesAsLive(const AgentMemory& memory);
};

AgentMemory Retrieval(int block_size, int top_k) {
  AgentMemory m;
  m.mode = MemoryMode::kRetrieval;
  m.retrieval.block_size = block_size;
  m.retrieval.top_k = top_k;
  return m;
}

// Rows a turn reads for a history of h rows: the newest block when partial, plus top_k others.
int64_t RetrievedRows(int64_t h, int64_t bs, int64_t top_k) {
  const int64_t blocks = (h + bs - 1) / bs;
  const int64_t partial = h % bs;
  return std::min(top_k, blocks - (partial > 0 ? 1 : 0)) * bs + partial;
}

TEST_F(AgentRetrievalTest, TurnsPrefillOnlyWhatThePromptAdds) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Retrieval(8, 2)).ok());
  std::string r1, r2;
  const std::string t1 = "The quick brown fox jumps over the lazy dog near the river bank.";
  const TurnResult a = Turn(*rt, &ada_, t1, &r1);
  ASSERT_TRUE(a.retrieval);
  EXPECT_EQ(a.retrieval->history_tokens, 0);
  EXPECT_EQ(a.retrieval->retrieved_rows, 0);
  EXPECT_EQ(a.retrieval->prefill_tokens, 1 + static_cast<int64_t>(t1.size()));
  // Every sampled token but the last (or the end-of-turn one) was fed back into the memory.
  EXPECT_EQ(a.kv_tokens, a.retrieval->prefill_tokens + a.completion_tokens - 1);

  // The client resends the conversation: only its new part is computed.
  const int64_t h = a.kv_tokens;
  const std::string history = (t1 + r1).substr(0, h - 1);  // the bytes of tokens 1..h-1
  const std::string t2 = t1 + r1 + " Where did the fox go after that?";
  const TurnResult b = Turn(*rt, &ada_, t2, &r2);
  ASSERT_TRUE(b.retrieval);
  const RetrievalTurn& ret = *b.retrieval;
  EXPECT_EQ(b.prompt.match, store::PrefixMatchKind::kExtend);
  EXPECT_EQ(ret.history_tokens, h);
  EXPECT_EQ(ret.prefill_tokens, static_cast<int64_t>(t2.size() - history.size()));
  EXPECT_EQ(ret.retrieved_rows, RetrievedRows(h, 8, 2));
  EXPECT_EQ(ret.kv_len_decode, ret.retrieved_rows + ret.prefill_tokens);
  EXPECT_EQ(b.prompt.cached_tokens, ret.retrieved_rows);
  EXPECT_EQ(b.prompt.prompt_tokens, ret.retrieved_rows + ret.prefill_tokens);
  EXPECT_EQ(b.kv_tokens, h + ret.prefill_tokens + b.completion_tokens - 1);
  ASSERT_GE(ret.blocks.size(), 3u);  // each layer reads the partial block and two others
  for (const RecalledBlock& blk : ret.blocks) {
    EXPECT_EQ(blk.first_token, blk.block * 8);
    EXPECT_EQ(blk.n_tokens, std::min<int64_t>(8, h - blk.first_token));
    EXPECT_GE(blk.layers, 1);
    EXPECT_LE(blk.layers, model_->spec().n_layers);
    const int64_t from = std::max<int64_t>(blk.first_token, 1) - 1;
    EXPECT_EQ(blk.text, history.substr(from, blk.first_token + blk.n_tokens - 1 - from));
  }
  EXPECT_EQ(ret.blocks.back().block, (h - 1) / 8);  // the partial block, always read

  auto st = rt->Get(ada_);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->mode, MemoryMode::kRetrieval);
  ASSERT_TRUE(st->last_turn);
  EXPECT_EQ(st->last_turn->blocks.size(), ret.blocks.size());
}

TEST_F(AgentRetrievalTest, HistoryOutgrowsTheContext) {
  auto rt = Runtime();  // n_ctx 512
  ASSERT_TRUE(rt->CreateAgent(ada_, Retrieval(8, 4)).ok());
  std::string reply, all;
  int64_t kv_tokens = 0;
  for (int turn = 0; turn < 12; ++turn) {
    // A client that sends only the new message: the memory holds the rest.
    const std::string msg = "Message " + std::to_string(turn) + ": " + std::string(90, 'a' + turn);
    all += msg;
    const TurnResult r = Turn(*rt, &ada_, msg, &reply);
    ASSERT_TRUE(r.retrieval) << "turn " << turn;
    EXPECT_LE(r.retrieval->kv_len_decode, 5 * 8 + r.retrieval->prefill_tokens);
    kv_tokens = r.kv_tokens;
  }
  EXPECT_GT(kv_tokens, 2 * 512);
  // The same conversation in a full cache does not fit the context.
  const store::AgentKey bob{"t", "bob"};
  TurnParams p;
  p.max_tokens = 1;
  EXPECT_EQ(rt->RunTurn(&bob, all, p, {}).status().code(), ErrorCode::kOutOfRange);
}

TEST_F(AgentRetrievalTest, RestartedRuntimeRetrievesAndRepliesAsTheLiveOne) {
  AgentMemory memory = Retrieval(8, 2);
  memory.retrieval.neighbors = 1;
  memory.retrieval.turn_bounded = true;
  memory.retrieval.retrieval_heads = {{1, 0}, {0, 3}};
  ExpectRestartRetrievesAsLive(memory);
}

// Whole turns: this tokenizer opens no chat messages, so the history is one turn, longer than
// the budget: the best blocks are read alone.
TEST_F(AgentRetrievalTest, RestartedRuntimeReadsWholeTurnsAsTheLiveOne) {
  AgentMemory memory = Retrieval(8, 2);
  memory.retrieval.whole_turns = true;
  memory.retrieval.retrieval_heads = {{1, 0}, {0, 3}};
  ExpectRestartRetrievesAsLive(memory);
}

void AgentRetrievalTest::ExpectRestartRetrievesAsLive(const AgentMemory& memory) {
  auto live = Runtime();
  ASSERT_TRUE(live->CreateAgent(ada_, memory).ok());
  std::string r1, r2;
  const std::string t1 = "Ada keeps a red notebook in the top drawer of her desk at home.";
  Turn(*live, &ada_, t1, &r1);
  const std::string t2 = t1 + r1 + " She also owns a green bicycle with a bell.";
  Turn(*live, &ada_, t2, &r2);
  auto policy = store_->ReadMemoryPolicy(ada_);
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  EXPECT_EQ(policy->mode, "retrieval");
  EXPECT_EQ(policy->block_size, 8);
  EXPECT_EQ(policy->top_k, 2);
  EXPECT_EQ(policy->neighbors, memory.retrieval.neighbors);
  EXPECT_EQ(policy->turn_bounded, memory.retrieval.turn_bounded);
  EXPECT_EQ(policy->whole_turns, memory.retrieval.whole_turns);
  EXPECT_EQ(policy->retrieval_heads, (std::vector<std::string>{"1.0", "0.3"}));

  auto restarted = Runtime();
  auto listed = restarted->Get(ada_);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->mode, MemoryMode::kRetrieval);
  EXPECT_EQ(listed->tier, Tier::kWarm);
  const std::string t3 = t2 + r2 + " Where is the notebook?";
  std::string warm_reply, hot_reply;
  const TurnResult warm = Turn(*restarted, &ada_, t3, &warm_reply);
  const TurnResult hot = Turn(*live, &ada_, t3, &hot_reply);
  EXPECT_EQ(warm.prompt.tier, Tier::kWarm);
  EXPECT_EQ(hot.prompt.tier, Tier::kHot);
  ASSERT_TRUE(warm.retrieval && hot.retrieval);
  EXPECT_EQ(warm.retrieval->history_tokens, hot.retrieval->history_tokens);
  EXPECT_EQ(warm.retrieval->prefill_tokens, hot.retrieval->prefill_tokens);
  EXPECT_EQ(warm.retrieval->retrieved_rows, hot.retrieval->retrieved_rows);
  ASSERT_EQ(warm.retrieval->blocks.size(), hot.retrieval->blocks.size());
  for (size_t i = 0; i < hot.retrieval->blocks.size(); ++i) {
    EXPECT_EQ(warm.retrieval->blocks[i].block, hot.retrieval->blocks[i].block);
    EXPECT_EQ(warm.retrieval->blocks[i].layers, hot.retrieval->blocks[i].layers);
    EXPECT_EQ(warm.retrieval->blocks[i].text, hot.retrieval->blocks[i].text);
  }
  EXPECT_EQ(warm_reply, hot_reply);
}

// retrieval_query names the tokens that score: with one token per byte their range is the
// query's place in the new message, counted by hand; naming the whole new message scores as no
// query does; a query the new message does not hold is refused and the memory is unchanged.
TEST_F(AgentRetrievalTest, RetrievalQueryNamesTheScoringTokens) {
  auto rt = Runtime();
  const store::AgentKey bob{"t", "bob"}, cy{"t", "cy"};
  const std::string t1 = "Ada keeps a red notebook in the top drawer of her desk at home.";
  std::string reply;
  for (const store::AgentKey* key : {&ada_, &bob, &cy}) {
    ASSERT_TRUE(rt->CreateAgent(*key, Retrieval(8, 2)).ok());
    Turn(*rt, key, t1, &reply);
  }
  // Clients that send only the new message.
  const std::string msg = " Answer in a few words. Where is the notebook? Thanks.";
  const std::string query = "Where is the notebook?";
  const TurnResult a = Turn(*rt, &ada_, msg, &reply, 6, query);
  ASSERT_TRUE(a.retrieval);
  EXPECT_EQ(a.retrieval->prefill_tokens, static_cast<int64_t>(msg.size()));
  EXPECT_EQ(a.retrieval->scoring_begin, static_cast<int64_t>(msg.find(query)));
  EXPECT_EQ(a.retrieval->scoring_end, static_cast<int64_t>(msg.find(query) + query.size()));

  std::string whole_reply, plain_reply;
  const TurnResult whole = Turn(*rt, &bob, msg, &whole_reply, 6, msg);
  const TurnResult plain = Turn(*rt, &cy, msg, &plain_reply);
  ASSERT_TRUE(whole.retrieval && plain.retrieval);
  // Here the question's tokens alone choose other blocks than the whole message's (the same
  // history otherwise: the range reaches the memory).
  auto votes = [](const RetrievalTurn& t) {
    std::vector<std::pair<int64_t, int>> v;
    for (const RecalledBlock& b : t.blocks) v.emplace_back(b.block, b.layers);
    return v;
  };
  EXPECT_NE(votes(*a.retrieval), votes(*plain.retrieval));
  EXPECT_EQ(plain.retrieval->scoring_begin, 0);
  EXPECT_EQ(plain.retrieval->scoring_end, static_cast<int64_t>(msg.size()) - 1);
  EXPECT_EQ(whole.retrieval->scoring_begin, 0);
  EXPECT_EQ(whole.retrieval->scoring_end, plain.retrieval->scoring_end);
  ASSERT_EQ(whole.retrieval->blocks.size(), plain.retrieval->blocks.size());
  for (size_t i = 0; i < plain.retrieval->blocks.size(); ++i) {
    EXPECT_EQ(whole.retrieval->blocks[i].block, plain.retrieval->blocks[i].block);
    EXPECT_EQ(whole.retrieval->blocks[i].layers, plain.retrieval->blocks[i].layers);
  }
  EXPECT_EQ(whole_reply, plain_reply);

  const int64_t before = rt->Get(ada_)->tokens;
  TurnParams p;
  p.max_tokens = 4;
  p.retrieval_query = "Where is the pen?";
  auto bad = rt->RunTurn(&ada_, " Where is the notebook now?", p, {});
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("retrieval_query"), std::string::npos);
  EXPECT_EQ(rt->Get(ada_)->tokens, before);
}

TEST_F(AgentRetrievalTest, CreateRefusesExistingAgentsAndBadSettings) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Retrieval(16, 4)).ok());
  EXPECT_EQ(rt->CreateAgent(ada_, Retrieval(16, 4)).code(), ErrorCode::kFailedPrecondition);
  const store::AgentKey bob{"t", "bob"};
  std::string reply;
  Turn(*rt, &bob, "A full agent, made by its first turn.", &reply);
  EXPECT_EQ(rt->CreateAgent(bob, Retrieval(16, 4)).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(rt->Get(bob)->mode, MemoryMode::kFull);
  const store::AgentKey cy{"t", "cy"};
  EXPECT_EQ(rt->CreateAgent(cy, Retrieval(12, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->CreateAgent(cy, Retrieval(16, 0)).code(), ErrorCode::kInvalidArgument);
  AgentMemory no_such_head = Retrieval(16, 4);
  no_such_head.retrieval.retrieval_heads = {{0, 0}, {99, 0}};  // the tiny model has 2 layers
  EXPECT_EQ(rt->CreateAgent(cy, no_such_head).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->CreateAgent({"t", "bad id"}, Retrieval(16, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->Get(cy).status().code(), ErrorCode::kNotFound);
  // A created agent is listed before its first turn, and Delete forgets it.
  EXPECT_EQ(rt->Get(ada_)->mode, MemoryMode::kRetrieval);
  EXPECT_TRUE(rt->Delete(ada_).ok());
  EXPECT_EQ(rt->Get(ada_).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvmem::memory
