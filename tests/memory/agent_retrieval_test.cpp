// memart agents (memory/retrieval/memart_policy.h) on the tiny llama with the byte tokenizer (token t >= 1 spells
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
  // Two turns with `config`; then a runtime restarted on the store and the live one answer a
  // third alike: same blocks, rows and reply.
  void ExpectRestartRetrievesAsLive(const Json& config);
};

Json Retrieval(int block_size, int top_k) {
  return Json{{"block_size", block_size}, {"top_k", top_k}};
}

MemorySpec Memart(const AgentRuntime& rt, const Json& config) {
  auto spec = rt.ValidateMemory("memart", config);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : MemorySpec{};
}

// The report's blocks as (block, layers).
std::vector<std::pair<int64_t, int>> Votes(const Json& report) {
  std::vector<std::pair<int64_t, int>> v;
  for (const Json& b : report["blocks"]) v.emplace_back(b["block"], b["layers"]);
  return v;
}

// Rows a turn reads for a history of h rows: the newest block when partial, plus top_k others.
int64_t RetrievedRows(int64_t h, int64_t bs, int64_t top_k) {
  const int64_t blocks = (h + bs - 1) / bs;
  const int64_t partial = h % bs;
  return std::min(top_k, blocks - (partial > 0 ? 1 : 0)) * bs + partial;
}

TEST_F(AgentRetrievalTest, TurnsPrefillOnlyWhatThePromptAdds) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Memart(*rt, Retrieval(8, 2))).ok());
  std::string r1, r2;
  const std::string t1 = "The quick brown fox jumps over the lazy dog near the river bank.";
  const TurnResult a = Turn(*rt, &ada_, t1, &r1);
  const Json& ra = a.memory_report;
  EXPECT_EQ(ra["history_tokens"], 0);
  EXPECT_EQ(ra["retrieved_rows"], 0);
  EXPECT_EQ(ra["prefill_tokens"], 1 + static_cast<int64_t>(t1.size()));
  // Every sampled token but the last (or the end-of-turn one) was fed back into the memory.
  EXPECT_EQ(a.kv_tokens, ra["prefill_tokens"].get<int64_t>() + a.completion_tokens - 1);

  // The client resends the conversation: only its new part is computed.
  const int64_t h = a.kv_tokens;
  const std::string history = (t1 + r1).substr(0, h - 1);  // the bytes of tokens 1..h-1
  const std::string t2 = t1 + r1 + " Where did the fox go after that?";
  const TurnResult b = Turn(*rt, &ada_, t2, &r2);
  const Json& ret = b.memory_report;
  const int64_t retrieved = ret["retrieved_rows"], prefill = ret["prefill_tokens"];
  EXPECT_EQ(b.prompt.match, store::PrefixMatchKind::kExtend);
  EXPECT_EQ(ret["history_tokens"], h);
  EXPECT_EQ(prefill, static_cast<int64_t>(t2.size() - history.size()));
  EXPECT_EQ(retrieved, RetrievedRows(h, 8, 2));
  EXPECT_EQ(ret["kv_len_decode"], retrieved + prefill);
  EXPECT_EQ(b.prompt.cached_tokens, retrieved);
  EXPECT_EQ(b.prompt.prompt_tokens, retrieved + prefill);
  EXPECT_EQ(b.kv_tokens, h + prefill + b.completion_tokens - 1);
  ASSERT_GE(ret["blocks"].size(), 3u);  // each layer reads the partial block and two others
  for (const Json& blk : ret["blocks"]) {
    const int64_t block = blk["block"], first = blk["first_token"], n = blk["n_tokens"];
    EXPECT_EQ(first, block * 8);
    EXPECT_EQ(n, std::min<int64_t>(8, h - first));
    EXPECT_GE(blk["layers"], 1);
    EXPECT_LE(blk["layers"], model_->spec().n_layers);
    const int64_t from = std::max<int64_t>(first, 1) - 1;
    EXPECT_EQ(blk["text"], history.substr(from, first + n - 1 - from));
  }
  EXPECT_EQ(ret["blocks"].back()["block"], (h - 1) / 8);  // the partial block, always read
  // The tiny model has no preset: the report says the paper's retrieval runs.
  EXPECT_EQ(ret["preset"], "paper");
  EXPECT_NE(ret.value("note", "").find("no preset"), std::string::npos) << ret.dump();

  auto st = rt->Get(ada_);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->policy, "memart");
  EXPECT_EQ(st->config["top_k"], 2);
  EXPECT_EQ(st->last_turn, ret);
}

TEST_F(AgentRetrievalTest, HistoryOutgrowsTheContext) {
  auto rt = Runtime();  // n_ctx 512
  ASSERT_TRUE(rt->CreateAgent(ada_, Memart(*rt, Retrieval(8, 4))).ok());
  std::string reply, all;
  int64_t kv_tokens = 0;
  for (int turn = 0; turn < 12; ++turn) {
    // A client that sends only the new message: the memory holds the rest.
    const std::string msg = "Message " + std::to_string(turn) + ": " + std::string(90, 'a' + turn);
    all += msg;
    const TurnResult r = Turn(*rt, &ada_, msg, &reply);
    const Json& rep = r.memory_report;
    EXPECT_LE(rep["kv_len_decode"], 5 * 8 + rep["prefill_tokens"].get<int64_t>()) << turn;
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
  Json config = Retrieval(8, 2);
  config["neighbors"] = 1;
  config["heads"] = {"1.0", "0.3"};
  ExpectRestartRetrievesAsLive(config);
}

void AgentRetrievalTest::ExpectRestartRetrievesAsLive(const Json& config) {
  auto live = Runtime();
  ASSERT_TRUE(live->CreateAgent(ada_, Memart(*live, config)).ok());
  std::string r1, r2;
  const std::string t1 = "Ada keeps a red notebook in the top drawer of her desk at home.";
  Turn(*live, &ada_, t1, &r1);
  const std::string t2 = t1 + r1 + " She also owns a green bicycle with a bell.";
  Turn(*live, &ada_, t2, &r2);
  auto stored = store_->ReadMemory(ada_);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->policy, "memart");
  EXPECT_EQ(stored->config["block_size"], 8);
  EXPECT_EQ(stored->config["top_k"], 2);
  EXPECT_EQ(stored->config["neighbors"], config["neighbors"]);
  EXPECT_EQ(stored->config["heads"], (Json{"1.0", "0.3"}));

  auto restarted = Runtime();
  auto listed = restarted->Get(ada_);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->policy, "memart");
  EXPECT_EQ(listed->tier, Tier::kWarm);
  const std::string t3 = t2 + r2 + " Where is the notebook?";
  std::string warm_reply, hot_reply;
  const TurnResult warm = Turn(*restarted, &ada_, t3, &warm_reply);
  const TurnResult hot = Turn(*live, &ada_, t3, &hot_reply);
  EXPECT_EQ(warm.prompt.tier, Tier::kWarm);
  EXPECT_EQ(hot.prompt.tier, Tier::kHot);
  // Same history, rows, blocks (with their layers and text) and reply.
  EXPECT_EQ(warm.memory_report, hot.memory_report);
  EXPECT_FALSE(hot.memory_report["blocks"].empty());
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
    ASSERT_TRUE(rt->CreateAgent(*key, Memart(*rt, Retrieval(8, 2))).ok());
    Turn(*rt, key, t1, &reply);
  }
  // Clients that send only the new message.
  const std::string msg = " Answer in a few words. Where is the notebook? Thanks.";
  const std::string query = "Where is the notebook?";
  const TurnResult a = Turn(*rt, &ada_, msg, &reply, 6, query);
  EXPECT_EQ(a.memory_report["prefill_tokens"], static_cast<int64_t>(msg.size()));
  EXPECT_EQ(a.memory_report["scoring_tokens"],
            (Json{msg.find(query), msg.find(query) + query.size()}));

  std::string whole_reply, plain_reply;
  const TurnResult whole = Turn(*rt, &bob, msg, &whole_reply, 6, msg);
  const TurnResult plain = Turn(*rt, &cy, msg, &plain_reply);
  // Here the question's tokens alone choose other blocks than the whole message's (the same
  // history otherwise: the range reaches the memory).
  EXPECT_NE(Votes(a.memory_report), Votes(plain.memory_report));
  EXPECT_EQ(plain.memory_report["scoring_tokens"], (Json{0, msg.size()}));
  EXPECT_EQ(whole.memory_report["scoring_tokens"], plain.memory_report["scoring_tokens"]);
  EXPECT_EQ(Votes(whole.memory_report), Votes(plain.memory_report));
  EXPECT_EQ(whole_reply, plain_reply);

  const int64_t before = rt->Get(ada_)->tokens;
  TurnParams p;
  p.max_tokens = 4;
  p.focus = "Where is the pen?";
  auto bad = rt->RunTurn(&ada_, " Where is the notebook now?", p, {});
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("retrieval_query"), std::string::npos);
  EXPECT_EQ(rt->Get(ada_)->tokens, before);
}

TEST_F(AgentRetrievalTest, CreateRefusesExistingAgentsAndBadSettings) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Memart(*rt, Retrieval(16, 4))).ok());
  EXPECT_EQ(rt->CreateAgent(ada_, Memart(*rt, Retrieval(16, 4))).code(),
            ErrorCode::kFailedPrecondition);
  const store::AgentKey bob{"t", "bob"};
  std::string reply;
  Turn(*rt, &bob, "A full agent, made by its first turn.", &reply);
  EXPECT_EQ(rt->CreateAgent(bob, Memart(*rt, Retrieval(16, 4))).code(),
            ErrorCode::kFailedPrecondition);
  EXPECT_EQ(rt->Get(bob)->policy, "full");
  // The config is validated by the policy's parser, naming the field.
  for (const Json& bad : {Retrieval(12, 4), Retrieval(16, 0),
                          Json{{"heads", {"0.0", "99.0"}}},  // the tiny model has 2 layers
                          Json{{"top_k", "many"}}, Json{{"whole_turns", true}}}) {
    auto spec = rt->ValidateMemory("memart", bad);
    EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument) << bad.dump();
  }
  EXPECT_NE(rt->ValidateMemory("memart", Retrieval(16, 0)).status().message().find("top_k"),
            std::string::npos);
  auto unknown = rt->ValidateMemory("nope", Json::object());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("full, memart, h2o"), std::string::npos);
  EXPECT_EQ(rt->CreateAgent({"t", "bad\tid"}, Memart(*rt, Retrieval(16, 4))).code(),
            ErrorCode::kInvalidArgument);
  const store::AgentKey cy{"t", "cy"};
  EXPECT_EQ(rt->Get(cy).status().code(), ErrorCode::kNotFound);
  // A created agent is listed before its first turn, and Delete forgets it.
  EXPECT_EQ(rt->Get(ada_)->policy, "memart");
  EXPECT_TRUE(rt->Delete(ada_).ok());
  EXPECT_EQ(rt->Get(ada_).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvmem::memory
