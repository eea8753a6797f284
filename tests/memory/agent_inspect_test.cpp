// What the memory inspector reads through AgentRuntime (memory/agents/inspection.h), on the tiny
// llama with the byte tokenizer: each policy's Inspect() (cached byte ranges of its text, its
// parts), MemArt's per-layer block ranks in the turn records (the blocks a layer read are its
// top_k by rank), and the bounded record of recent turns.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "agent_runtime_fixture.h"

namespace kvmem::memory {
namespace {

class AgentInspectTest : public testing::AgentRuntimeFixture {
 protected:
  MemorySpec Spec(const AgentRuntime& rt, const char* policy, const Json& config) {
    auto spec = rt.ValidateMemory(policy, config);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return spec.ok() ? *spec : MemorySpec{};
  }
};

const char* const kLines[] = {
    "Ada: I planted tomatoes and basil in the garden this spring.\n",
    "Ben: Nice! My cello recital is next Friday at the town hall.\n",
    "Ada: The basil is already taller than the fence.\n",
    "Ben: I practise the Bach suite every evening for two hours.\n",
    "Ada: Slugs ate half of the lettuce last night.\n",
    "Ben: My teacher says my bowing got much smoother.\n",
};

// [begin, end, ...] as pairs, checking they are ascending, disjoint and within `size`.
std::vector<std::pair<size_t, size_t>> Ranges(const Json& flat, size_t size) {
  std::vector<std::pair<size_t, size_t>> out;
  EXPECT_EQ(flat.size() % 2, 0u);
  for (size_t i = 0; i + 1 < flat.size(); i += 2) {
    const size_t b = flat[i], e = flat[i + 1];
    EXPECT_LT(b, e);
    EXPECT_LE(e, size);
    if (!out.empty()) {
      EXPECT_LE(out.back().second, b);
    }
    out.emplace_back(b, e);
  }
  return out;
}

TEST_F(AgentInspectTest, TurnsSayWhereTheMemoryCameFrom) {
  std::string conversation = "Turn 0: hello.\n", reply;
  {
    auto rt = Runtime();
    Turn(*rt, &ada_, conversation, &reply, 2);
    conversation += reply + "Turn 1: again.\n";
    Turn(*rt, &ada_, conversation, &reply, 2);
    auto turns = rt->RecentTurns(ada_);
    ASSERT_TRUE(turns.ok()) << turns.status().ToString();
    ASSERT_EQ(turns->size(), 2u);
    EXPECT_EQ((*turns)[0].tier, Tier::kMiss);
    EXPECT_EQ((*turns)[1].tier, Tier::kHot);
    EXPECT_EQ((*turns)[0].load_ms, 0);
    EXPECT_EQ((*turns)[1].load_ms, 0);
  }
  // A new runtime over the same store (a restarted server) reads the agent from disk.
  auto rt = Runtime();
  conversation += reply + "Turn 2: still here?\n";
  const TurnResult r = Turn(*rt, &ada_, conversation, &reply, 2);
  EXPECT_GT(r.prompt.cached_tokens, 0);
  auto turns = rt->RecentTurns(ada_);
  ASSERT_TRUE(turns.ok()) << turns.status().ToString();
  ASSERT_EQ(turns->size(), 1u);
  EXPECT_EQ((*turns)[0].tier, Tier::kWarm);
  EXPECT_GT((*turns)[0].load_ms, 0);
}

TEST_F(AgentInspectTest, FullMemoryIsItsWholeTextAndTurnsAreBounded) {
  auto rt = Runtime();
  EXPECT_EQ(rt->Inspect(ada_).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(rt->RecentTurns(ada_).status().code(), ErrorCode::kNotFound);
  std::string conversation, reply;
  for (int i = 0; i < 10; ++i) {
    conversation += "Turn " + std::to_string(i) + ": hello.\n";  // ten fit the context
    Turn(*rt, &ada_, conversation, &reply, 2);
    conversation += reply;
  }
  auto view = rt->Inspect(ada_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->policy, "full");
  // The conversation but the reply's last token, which the client sends back (byte tokenizer:
  // one byte).
  EXPECT_EQ(view->text, conversation.substr(0, conversation.size() - 1));
  EXPECT_EQ(view->memory["cached"], Json::array({0, view->text.size()}));
  EXPECT_EQ(view->memory["parts"], Json::array());

  auto turns = rt->RecentTurns(ada_);
  ASSERT_TRUE(turns.ok()) << turns.status().ToString();
  ASSERT_EQ(turns->size(), kRecentTurns);
  for (size_t i = 0; i < turns->size(); ++i) {
    EXPECT_EQ((*turns)[i].turn, static_cast<int64_t>(10 - kRecentTurns + i + 1));
    EXPECT_GT((*turns)[i].cached_tokens, 0);
    EXPECT_TRUE((*turns)[i].report.contains("match"));
  }
  // Another tenant's agent of the same id does not exist.
  EXPECT_EQ(rt->Inspect({"other", "ada"}).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(rt->RecentTurns({"other", "ada"}).status().code(), ErrorCode::kNotFound);
  // A restarted runtime shows the stored memory, and no turns yet.
  rt.reset();
  auto again = Runtime();
  auto stored = again->Inspect(ada_);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->text, view->text);
  auto none = again->RecentTurns(ada_);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST_F(AgentInspectTest, MemArtBlocksAndTheRanksEachLayerChoseBy) {
  auto rt = Runtime();
  const int64_t bs = 8, top_k = 2;
  ASSERT_TRUE(rt->CreateAgent(ada_, Spec(*rt, "memart",
                                         {{"preset", "paper"},
                                          {"block_size", bs},
                                          {"top_k", top_k},
                                          {"keep_first", 0},
                                          {"keep_last", 0}}))
                  .ok());
  std::string reply;
  for (int i = 0; i < 4; ++i) Turn(*rt, &ada_, kLines[i], &reply, 3);

  auto view = rt->Inspect(ada_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->policy, "memart");
  const Json& parts = view->memory["parts"];
  ASSERT_EQ(static_cast<int64_t>(parts.size()), (view->rows + bs - 1) / bs);
  size_t at = 0;
  for (size_t b = 0; b < parts.size(); ++b) {
    EXPECT_EQ(parts[b]["kind"], "block");
    EXPECT_EQ(parts[b]["block"], b);
    EXPECT_EQ(parts[b]["bytes"][0], at);  // the blocks tile the text
    at = parts[b]["bytes"][1];
  }
  EXPECT_EQ(at, view->text.size());
  EXPECT_EQ(view->memory["cached"], Json::array({0, view->text.size()}));

  auto turns = rt->RecentTurns(ada_);
  ASSERT_TRUE(turns.ok());
  ASSERT_EQ(turns->size(), 4u);
  const Json& ranks = turns->back().detail["ranks"];
  ASSERT_FALSE(ranks.empty());
  const size_t n_layers = static_cast<size_t>(model_->spec().n_layers);
  int scored = 0;
  for (const Json& block : ranks) {
    ASSERT_EQ(block["ranks"].size(), n_layers);
    std::vector<bool> read(n_layers, false);
    for (const Json& l : block["layers"]) read[l.get<size_t>()] = true;
    for (size_t l = 0; l < n_layers; ++l) {
      const int rank = block["ranks"][l];
      if (rank == 0) continue;  // the newest partial block: always read, never ranked
      ++scored;
      // A layer reads exactly its top_k candidates by rank.
      EXPECT_EQ(read[l], rank <= top_k) << "block " << block["block"] << " layer " << l;
    }
  }
  EXPECT_GT(scored, 0);
}

TEST_F(AgentInspectTest, IntentKvShowsItsDroppedRows) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Spec(*rt, "intentkv", {{"budget", 24}})).ok());
  std::string conversation, reply;
  for (int i = 0; i < 4; ++i) {
    conversation += kLines[i];
    Turn(*rt, &ada_, conversation, &reply, 2);
    conversation += reply;
  }
  auto view = rt->Inspect(ada_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const size_t size = view->text.size();
  const auto cached = Ranges(view->memory["cached"], size);
  std::vector<std::pair<size_t, size_t>> dropped;
  for (const Json& p : view->memory["parts"]) {
    EXPECT_EQ(p["kind"], "dropped");
    dropped.emplace_back(p["bytes"][0], p["bytes"][1]);
  }
  ASSERT_FALSE(dropped.empty()) << "the history passed the budget";
  // Live and dropped rows tile the text.
  std::vector<std::pair<size_t, size_t>> all = cached;
  all.insert(all.end(), dropped.begin(), dropped.end());
  std::sort(all.begin(), all.end());
  size_t at = 0;
  for (const auto& [b, e] : all) {
    EXPECT_EQ(b, at);
    at = e;
  }
  EXPECT_EQ(at, size);
}

TEST_F(AgentInspectTest, EpiCacheUtterancesAndItsTail) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, Spec(*rt, "epicache",
                                         {{"budget", 24},
                                          {"block", 40},
                                          {"episodes", 2},
                                          {"segment", 2},
                                          {"layer_budgets", "uniform"}}))
                  .ok());
  std::string reply;
  for (int i = 0; i < 8; ++i) Turn(*rt, &ada_, kLines[i % 6], &reply, 2);
  auto view = rt->Inspect(ada_);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const size_t size = view->text.size();
  const Json& parts = view->memory["parts"];
  ASSERT_FALSE(parts.empty());
  size_t at = 0;
  for (const Json& p : parts) {
    EXPECT_EQ(p["kind"], "utterance");
    EXPECT_EQ(p["bytes"][0], at);
    at = p["bytes"][1];
    EXPECT_TRUE(p["episode"].is_null() || (p["episode"] >= 0 && p["episode"] < 2)) << p;
  }
  EXPECT_EQ(at, size);
  // The uncompressed tail ends the text.
  const auto cached = Ranges(view->memory["cached"], size);
  ASSERT_LE(cached.size(), 1u);
  if (!cached.empty()) {
    EXPECT_EQ(cached[0].second, size);
  }
}

}  // namespace
}  // namespace kvmem::memory
