// The epicache policy (memory/episodic/epicache_policy.h) end to end on a tiny random llama with
// the byte tokenizer and the tiny random BERT: a budget that holds the whole history answers
// exactly as the `full` policy over the same conversation, with episodes or without; the pool
// stays flat as the history grows; a request is routed to the episode whose centroid (as the
// state stores it) is nearest in cosine to the encoder's embedding of its focus.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "agent_runtime_fixture.h"
#include "memory/episodic/episodes.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {
namespace {

class EpiCachePolicyTest : public testing::AgentRuntimeFixture {
 protected:
  void SetUp() override {
    AgentRuntimeFixture::SetUp();
    env_.model = model_.get();
    env_.tok = &tok_;
    env_.threads = &threads_;
    batcher_ = std::make_unique<engine::StepBatcher>(*model_, &threads_, engine::StepBatcher::Options{});
    env_.compute = batcher_.get();
    env_.n_ctx = 512;
    env_.max_batch = 16;
    env_.encoder = &*encoder_;
  }

  struct Agent {
    std::unique_ptr<kv::KvPool> pool;
    std::unique_ptr<MemoryPolicy> policy;
  };
  Agent Make(const std::string& name, const Json& config) {
    auto spec = ParseMemorySpec(env_, name, config);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    Agent a;
    const int64_t rows = spec->kind->rows_needed(env_, spec->config);
    a.pool = std::make_unique<kv::KvPool>(model_->kv_geometry(8), static_cast<int>(rows / 8 + 4),
                                          kv::KvFormats{kv::KvFormat::kF16, kv::KvFormat::kF16});
    auto p = spec->kind->create(env_, spec->config, a.pool.get());
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    a.policy = std::move(*p);
    return a;
  }
  // One turn that joins the memory (no reply).
  void Feed(MemoryPolicy* p, const std::string& prompt) {
    auto plan = p->Plan({prompt, ""});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::vector<float> logits;
    ASSERT_TRUE(p->Apply(*plan, &logits).ok());
    ASSERT_TRUE(p->Commit().ok());
  }
  std::vector<float> Ask(MemoryPolicy* p, const std::string& prompt,
                         const std::string& focus = "") {
    auto plan = p->Plan({prompt, focus});
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    std::vector<float> logits;
    EXPECT_TRUE(p->Apply(*plan, &logits).ok());
    p->Abort();
    return logits;
  }

  std::unique_ptr<engine::StepBatcher> batcher_;
  PolicyEnv env_;
};

const char* const kLines[] = {
    "Ada: I planted tomatoes and basil in the garden this spring.\n",
    "Ben: Nice! My cello recital is next Friday at the town hall.\n",
    "Ada: The basil is already taller than the fence.\n",
    "Ben: I practise the Bach suite every evening for two hours.\n",
    "Ada: Slugs ate half of the lettuce last night.\n",
    "Ben: My teacher says my bowing got much smoother.\n",
};

TEST_F(EpiCachePolicyTest, ABudgetHoldingTheHistoryAnswersAsTheFullCache) {
  for (const char* scoring : {"recency", "episode", "keydiff"}) {
    Agent epi = Make("epicache", {{"budget", 512},
                                  {"block", 48},
                                  {"episodes", 2},
                                  {"segment", 2},
                                  {"scoring", scoring},
                                  {"sinks", 0},
                                  {"layer_budgets", "uniform"}});
    Agent full = Make("full", Json::object());
    std::string all;
    for (const char* line : kLines) {
      Feed(epi.policy.get(), line);
      all += line;
    }
    ASSERT_GT(epi.policy->Report().value("episodes", 0), 0) << "the history was compressed";
    const std::string q = "Q: What did the slugs eat?\nA:";
    const std::vector<float> got = Ask(epi.policy.get(), q);
    const std::vector<float> want = Ask(full.policy.get(), all + q);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-4f) << scoring;
  }
}

TEST_F(EpiCachePolicyTest, PoolStaysFlatAsTheHistoryGrows) {
  Agent epi = Make("epicache", {{"budget", 24},
                                {"block", 40},
                                {"episodes", 2},
                                {"segment", 2},
                                {"layer_budgets", "uniform"},
                                {"regroup", 0}});
  std::vector<size_t> bytes;
  for (int i = 0; i < 60; ++i) {
    Feed(epi.policy.get(), kLines[i % 6]);
    bytes.push_back(epi.pool->bytes_in_use());
  }
  // Two regions of 24 rows (three 8-row blocks each) and a tail of under a block plus a turn
  // (at most 64 bytes): the pool never holds more, however long the history.
  const size_t block = epi.pool->bytes_per_block();
  const size_t bound = (2 * 3 + (40 + 64 + 7) / 8 + 1) * block;
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_LE(bytes[i], bound) << "turn " << i;
  EXPECT_LE(epi.pool->peak_bytes_in_use(), bound + block);
  const Json report = epi.policy->Report();
  EXPECT_GT(report["history_tokens"].get<int64_t>(), 40 * 10);
}

TEST_F(EpiCachePolicyTest, RoutesToTheEpisodeWithTheNearestCentroid) {
  Agent epi = Make("epicache", {{"budget", 64},
                                {"block", 48},
                                {"episodes", 3},
                                {"segment", 1},
                                {"layer_budgets", "uniform"},
                                {"regroup", 0}});
  for (const char* line : kLines) Feed(epi.policy.get(), line);
  ASSERT_TRUE(epi.policy->Rebuild().ok());
  const Json state = epi.policy->Persist().state;
  auto episodes = EpisodesFromJson(state["episodes"], encoder_->dim());
  ASSERT_TRUE(episodes.ok()) << episodes.status().ToString();
  ASSERT_EQ(episodes->k, 3);
  for (const std::string focus : {"basil fence garden", "cello recital Bach", "slugs lettuce"}) {
    // The reference: cosine of the encoder's embedding with each stored centroid.
    const std::vector<std::string> one = {focus};
    const std::vector<float> e = encoder_->Embed(one, nullptr);
    int best = -1;
    double best_cos = -2;
    for (int k = 0; k < episodes->k; ++k) {
      double dot = 0, nc = 0, ne = 0;
      for (int d = 0; d < episodes->dim; ++d) {
        const double c = episodes->centroids[static_cast<size_t>(k) * episodes->dim + d];
        dot += c * e[d];
        nc += c * c;
        ne += static_cast<double>(e[d]) * e[d];
      }
      const double cos = dot / std::sqrt(nc * ne);
      if (cos > best_cos) best_cos = cos, best = k;
    }
    const std::string q = "Q: " + focus + "?\nA:";
    Ask(epi.policy.get(), q, focus);
    EXPECT_EQ(epi.policy->Report()["episode"].get<int>(), best) << focus;
  }
}

// A stored memory is untrusted: a state its rows cannot serve is refused as Corrupt, never read.
TEST_F(EpiCachePolicyTest, RestoreRefusesAStateItsRowsCannotServe) {
  const Json config = {
      {"budget", 24}, {"block", 40}, {"episodes", 2}, {"segment", 2}, {"layer_budgets", "uniform"},
      {"regroup", 0}};
  Agent epi = Make("epicache", config);
  for (int i = 0; i < 12; ++i) Feed(epi.policy.get(), kLines[i % 6]);
  const PersistedMemory p = epi.policy->Persist();
  const Json state = p.state;
  const std::vector<int32_t> tokens(p.tokens.begin(), p.tokens.end());
  const std::string text(p.text);
  const int64_t n_rows = p.rows->n_rows();
  const PolicyKind& kind = **FindPolicyKind("epicache");
  const Json parsed = *kind.parse(env_, config);
  // Restores over zero rows of the stored count; `release` gives back layer 0 of the first block.
  auto restore = [&](const Json& st, bool release) {
    kv::KvPool pool(model_->kv_geometry(8), 64, {kv::KvFormat::kF16, kv::KvFormat::kF16});
    StoredMemory m;
    m.rows = std::make_unique<kv::KvSequence>(&pool);
    auto rows = m.rows->AppendRows(static_cast<int>(n_rows), 0);
    EXPECT_TRUE(rows.ok());
    const kv::KvGeometry& g = pool.geometry();
    const std::vector<float> k(g.n_kv_heads * g.head_dim_k), v(g.n_kv_heads * g.head_dim_v);
    for (const kv::RowRef r : *rows) {
      for (int l = 0; l < g.n_layers; ++l) pool.WriteToken(r, l, k.data(), v.data());
    }
    if (release) m.rows->ReleaseStorage(0, 0);
    m.tokens = tokens;
    m.text = text;
    m.state = st;
    return kind.restore(env_, parsed, &pool, std::move(m)).status();
  };
  ASSERT_TRUE(restore(state, false).ok()) << restore(state, false).ToString();
  EXPECT_EQ(restore(state, true).code(), ErrorCode::kCorrupt);
  const std::vector<std::pair<std::string, Json>> edits = {
      {"capacity", 7},
      {"tail_first", 3},
      {"next_pos", -1},
      {"utterances", {5, 3}},
      {"prompts", {{-1}}},
      {"layer_rows", {1, 1}},
      {"caches", {{{"next_pos", 0}, {"positions", "!!"}}}},
      {"version", 2},
  };
  for (const auto& [key, value] : edits) {
    Json bad = state;
    bad[key] = value;
    EXPECT_EQ(restore(bad, false).code(), ErrorCode::kCorrupt) << key;
  }
  Json bad = state;
  bad["caches"][0]["positions"] = "AAAA";  // too short for the layers and heads
  EXPECT_EQ(restore(bad, false).code(), ErrorCode::kCorrupt);
  bad = state;
  bad["episodes"]["k"] = 5;
  EXPECT_EQ(restore(bad, false).code(), ErrorCode::kCorrupt);
}

// A client's rebuild (AgentRuntime::Rebuild, POST /v1/agents/{id}/rebuild): episodes clustered
// anew and saved, so a restarted runtime answers as the live one; nothing to do for `full`.
TEST_F(EpiCachePolicyTest, RuntimeRebuildIsSavedAndSurvivesARestart) {
  auto live = Runtime();
  const Json config = {
      {"budget", 32}, {"block", 48}, {"episodes", 2}, {"segment", 1}, {"layer_budgets", "uniform"},
      {"regroup", 0}};
  auto spec = live->ValidateMemory("epicache", config);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_TRUE(live->CreateAgent(ada_, *spec).ok());
  std::string prompt, reply;
  for (const char* line : kLines) {
    prompt += line;
    Turn(*live, &ada_, prompt, &reply, 2);
    prompt += reply;
  }
  auto done = live->Rebuild(ada_);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ((*done)["action"], "rebuild");
  EXPECT_EQ((*done)["episodes"], 2);
  prompt += "Q: what grows in the garden?\nA:";
  auto restarted = Runtime();
  std::string warm, hot;
  Turn(*restarted, &ada_, prompt, &warm);
  Turn(*live, &ada_, prompt, &hot);
  EXPECT_EQ(warm, hot);
  EXPECT_EQ(live->Rebuild({"t", "nobody"}).status().code(), ErrorCode::kNotFound);
  const store::AgentKey bo{"t", "bo"};
  ASSERT_TRUE(live->CreateAgent(bo, *live->ValidateMemory("full", Json::object())).ok());
  Turn(*live, &bo, "Hello there.", &reply);
  auto nothing = live->Rebuild(bo);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->is_null());
}

}  // namespace
}  // namespace kvmem::memory
