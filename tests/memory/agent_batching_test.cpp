// Many agents at once: turns of agents with different memory policies, run concurrently so
// their decode steps and prompt chunks share batched forward passes (engine/step_batcher.h),
// give every agent the replies and memory it gets when the turns run one after another, and
// each agent's memory holds only its own conversation.
#include <barrier>
#include <thread>

#include "agent_runtime_fixture.h"

namespace kvmem::memory::testing {
namespace {

class AgentBatchingTest : public AgentRuntimeFixture {
 protected:
  struct AgentCase {
    std::string policy;
    Json config;
    std::string tenant;
  };
  const std::vector<AgentCase> cases_ = {
      {"full", Json::object(), "t1"},
      {"full", Json::object(), "t1"},
      {"memart", {{"block_size", 8}, {"top_k", 2}}, "t1"},
      {"h2o", {{"budget", 12}}, "t2"},
      {"epicache",
       {{"budget", 16},
        {"block", 32},
        {"episodes", 2},
        {"segment", 1},
        {"medoids", 1},
        {"layer_budgets", "uniform"}},
       "t2"},
      {"full", Json::object(), "t3"},
  };
  static constexpr int kTurns = 3;

  std::string Said(size_t agent, int turn) const {
    static const char* const kWords[] = {"red notebook", "green bicycle", "river market",
                                         "blue kettle", "old lighthouse", "quiet garden"};
    return " Turn " + std::to_string(turn) + ": agent " + std::to_string(agent) +
           " talks about the " + kWords[(agent + static_cast<size_t>(turn)) % 6] + ".";
  }

  // Every agent's replies, turn by turn; agents named `prefix` + index.
  std::vector<std::vector<std::string>> RunAll(AgentRuntime& rt, const std::string& prefix,
                                               bool concurrent) {
    std::vector<std::vector<std::string>> replies(cases_.size());
    std::barrier sync(concurrent ? static_cast<std::ptrdiff_t>(cases_.size()) : 1);
    auto agent = [&](size_t i) {
      const store::AgentKey key{cases_[i].tenant, prefix + std::to_string(i)};
      auto spec = rt.ValidateMemory(cases_[i].policy, cases_[i].config);
      ASSERT_TRUE(spec.ok()) << spec.status().ToString();
      ASSERT_TRUE(rt.CreateAgent(key, *spec).ok());
      std::string prompt, reply;
      for (int t = 0; t < kTurns; ++t) {
        prompt += Said(i, t);
        sync.arrive_and_wait();  // every agent's turn starts together
        Turn(rt, &key, prompt, &reply, /*max_tokens=*/10);
        replies[i].push_back(reply);
        prompt += reply;
      }
    };
    if (concurrent) {
      std::vector<std::thread> threads;
      for (size_t i = 0; i < cases_.size(); ++i) threads.emplace_back(agent, i);
      for (auto& t : threads) t.join();
    } else {
      for (size_t i = 0; i < cases_.size(); ++i) agent(i);
    }
    return replies;
  }
};

TEST_F(AgentBatchingTest, ConcurrentTurnsAnswerAsSequentialOnes) {
  auto alone = Runtime();
  const auto want = RunAll(*alone, "alone-", /*concurrent=*/false);
  auto together = Runtime();
  const auto got = RunAll(*together, "together-", /*concurrent=*/true);
  for (size_t i = 0; i < cases_.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "agent " << i << " (" << cases_[i].policy << ")";
    const store::AgentKey a{cases_[i].tenant, "alone-" + std::to_string(i)};
    const store::AgentKey b{cases_[i].tenant, "together-" + std::to_string(i)};
    EXPECT_EQ(together->Get(b)->tokens, alone->Get(a)->tokens) << "agent " << i;
    // No cross-talk: the agent's memory is its own conversation only.
    if (cases_[i].policy == "full") {
      const auto text = together->ConversationText(b);
      ASSERT_TRUE(text.ok());
      for (size_t j = 0; j < cases_.size(); ++j) {
        const bool holds = text->find("agent " + std::to_string(j) + " ") != std::string::npos;
        EXPECT_EQ(holds, j == i) << "agent " << i << ", words of agent " << j;
      }
    }
  }
  // The turns did share steps.
  const engine::StepStats st = together->stats().steps;
  EXPECT_GT(st.steps, 0);
  EXPECT_GT(st.steps - st.steps_by_sequences[0], 0) << "no step served two agents";
}

}  // namespace
}  // namespace kvmem::memory::testing
