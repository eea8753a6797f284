// The runner against a fake server that keeps each agent's conversation as kvmem does: with a
// server-side conversation it holds what was sent and replied and counts it as cached; without,
// it holds nothing.
#include "scenario/runner.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvmem::scenario {
namespace {

struct FakeAgent {
  bool server_conversation = false;
  std::vector<ChatMessage> held;  // the server-side conversation
  int replies = 0;
};

class FakeServer : public ScenarioClient {
 public:
  Result<AgentOpened> OpenAgent(const std::string& id, const nlohmann::json& memory,
                                bool server_conversation) override {
    std::lock_guard lock(mu_);
    opened_memory[id] = memory;
    auto it = agents.find(id);
    if (it != agents.end()) return AgentOpened{true, static_cast<int64_t>(Chars(it->second.held))};
    agents[id].server_conversation = server_conversation;
    return AgentOpened{};
  }
  Status DeleteAgent(const std::string& id) override {
    std::lock_guard lock(mu_);
    deleted.push_back(id);
    agents.erase(id);
    return Status::Ok();
  }
  Result<ChatReply> Chat(const std::string& id, const std::vector<ChatMessage>& messages,
                         int max_tokens, double temperature) override {
    std::lock_guard lock(mu_);
    if (fail_on == static_cast<int>(requests.size())) return Unavailable("fake failure");
    requests.push_back({id, messages});
    FakeAgent& a = agents.at(id);
    std::vector<ChatMessage> prompt = a.server_conversation ? a.held : std::vector<ChatMessage>();
    const size_t cached = Chars(prompt);
    prompt.insert(prompt.end(), messages.begin(), messages.end());
    ChatReply reply;
    // The speaker's name cut from its id ("scenario/s/alice" -> "alice") and a count: unique.
    reply.text = id.substr(id.rfind('/') + 1) + "#" + std::to_string(++a.replies);
    reply.prompt_tokens = static_cast<int64_t>(Chars(prompt));
    reply.cached_tokens = static_cast<int64_t>(cached);
    reply.ttft_ms = 2.0;
    if (a.server_conversation) {
      a.held = prompt;
      a.held.push_back({"assistant", reply.text});
    }
    return reply;
  }

  static size_t Chars(const std::vector<ChatMessage>& m) {
    size_t n = 0;
    for (const ChatMessage& x : m) n += x.content.size();
    return n;
  }

  // Every request's text to agent `id`.
  std::string SentTo(const std::string& id) const {
    std::string all;
    for (const auto& [to, msgs] : requests) {
      if (to != id) continue;
      for (const ChatMessage& m : msgs) all += m.role + ": " + m.content + "\n";
    }
    return all;
  }

  std::mutex mu_;
  std::map<std::string, FakeAgent> agents;
  std::map<std::string, nlohmann::json> opened_memory;
  std::vector<std::string> deleted;
  std::vector<std::pair<std::string, std::vector<ChatMessage>>> requests;
  int fail_on = -1;
};

Scenario Gossip() {
  auto s = ParseScenario(R"(
name: g
agents:
  - {id: alice, name: Alice, system: "SYS-A"}
  - {id: bob, name: Bob, system: "SYS-B"}
  - {id: eve, name: Eve, system: "SYS-E", permanent: false, memory: {policy: memart}}
phases:
  - {name: ab, label: "Alice and Bob", agents: [alice, bob], auto_rounds: 2, prompt: "SECRET-AB"}
  - {name: ae, agents: [alice, eve], auto_rounds: 2, prompt: "SECRET-AE"}
  - name: all
    agents: [alice, bob, eve]
    prompt: "Meet."
    per_agent_prompt_templates:
      alice: "MEMORIES ${ab.messages[alice]} / ${ae.messages[alice]}"
      bob: "MEMORIES ${ab.messages[bob]}"
)");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

TEST(ScenarioRunner, NoAgentIsShownAPhaseItWasNotIn) {
  const Scenario s = Gossip();
  FakeServer fake;
  RunOptions o;
  auto r = RunScenario(s, &fake, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string bob = fake.SentTo("scenario/g/bob");
  const std::string eve = fake.SentTo("scenario/g/eve");
  const std::string alice = fake.SentTo("scenario/g/alice");
  // Bob never sees phase ae (its prompt, or eve's replies before the reunion); Eve never ab's.
  EXPECT_EQ(bob.find("SECRET-AE"), std::string::npos) << bob;
  EXPECT_EQ(bob.find("eve#1"), std::string::npos) << bob;
  EXPECT_EQ(bob.find("alice#3"), std::string::npos) << bob;  // Alice's first reply in ae
  EXPECT_EQ(eve.find("SECRET-AB"), std::string::npos) << eve;
  EXPECT_EQ(eve.find("bob#1"), std::string::npos) << eve;
  EXPECT_EQ(eve.find("alice#1"), std::string::npos) << eve;
  EXPECT_EQ(eve.find("MEMORIES"), std::string::npos) << eve;  // others' templates
  EXPECT_EQ(bob.find("alice#3"), std::string::npos) << bob;
  // Alice's template, from her perspective, reached her and no one else, nor the transcript.
  EXPECT_NE(
      alice.find("MEMORIES You: alice#1\nBob: bob#1\nYou: alice#2\nBob: bob#2 / You: alice#3\n"
                 "Eve: eve#1\nYou: alice#4\nEve: eve#2"),
      std::string::npos)
      << alice;
  const std::string transcript = r->Transcript(s, o);
  EXPECT_EQ(transcript.find("MEMORIES"), std::string::npos) << transcript;
  EXPECT_NE(transcript.find("## Alice and Bob"), std::string::npos) << transcript;
  EXPECT_NE(transcript.find("**Eve:** eve#3"), std::string::npos) << transcript;
  // The public transcript of each phase holds its speakers' replies only.
  ASSERT_EQ(r->phases.size(), 3u);
  EXPECT_EQ(r->phases[0].messages.size(), 4u);
  EXPECT_EQ(r->phases[2].messages.size(), 3u);
}

TEST(ScenarioRunner, CachedTurnsSendOnlyWhatIsNewAndMatchTheUncachedConversation) {
  const Scenario s = Gossip();
  FakeServer cached_server;
  FakeServer plain_server;
  RunOptions cached;
  RunOptions plain;
  plain.cache = false;
  ASSERT_TRUE(RunScenario(s, &cached_server, cached).ok());
  ASSERT_TRUE(RunScenario(s, &plain_server, plain).ok());
  for (const std::string agent : {"alice", "bob", "eve"}) {
    // Uncached: each request is the previous one, its reply, and a new user message (the text
    // an EXTEND needs). Cached: one new user message, and only the first has the system prompt.
    std::vector<std::vector<ChatMessage>> full;
    std::vector<std::vector<ChatMessage>> deltas;
    for (const auto& [to, m] : plain_server.requests) {
      if (to == "scenario-nocache/g/" + agent) full.push_back(m);
    }
    for (const auto& [to, m] : cached_server.requests) {
      if (to == "scenario/g/" + agent) deltas.push_back(m);
    }
    ASSERT_EQ(full.size(), deltas.size());
    ASSERT_FALSE(full.empty());
    EXPECT_EQ(deltas[0].size(), 2u);
    EXPECT_EQ(deltas[0][0].role, "system");
    std::vector<ChatMessage> rebuilt;
    for (size_t t = 0; t < full.size(); ++t) {
      if (t > 0) {
        ASSERT_EQ(deltas[t].size(), 1u) << agent << " turn " << t;
        EXPECT_EQ(deltas[t][0].role, "user");
        ASSERT_EQ(full[t].size(), full[t - 1].size() + 2);
        EXPECT_EQ(full[t][full[t].size() - 2].role, "assistant");
      }
      rebuilt.insert(rebuilt.end(), deltas[t].begin(), deltas[t].end());
      ASSERT_EQ(rebuilt.size(), full[t].size());
      for (size_t i = 0; i < rebuilt.size(); ++i) {
        EXPECT_EQ(rebuilt[i].content, full[t][i].content) << agent << " turn " << t;
      }
      rebuilt.push_back({"assistant", agent + "#" + std::to_string(t + 1)});
    }
  }
}

TEST(ScenarioRunner, ReportsTokensPerPhaseAndAgent) {
  const Scenario s = Gossip();
  FakeServer fake;
  RunOptions o;
  auto r = RunScenario(s, &fake, o);
  ASSERT_TRUE(r.ok());
  const nlohmann::json report = r->Report(s, o);
  ASSERT_EQ(report["phases"].size(), 3u);
  // Recompute every figure from the fake's own requests.
  int64_t prompt = 0;
  int64_t cached = 0;
  std::map<std::string, int64_t> held;
  size_t request = 0;
  for (size_t p = 0; p < s.phases.size(); ++p) {
    const nlohmann::json& phase = report["phases"][p];
    EXPECT_EQ(phase["name"], s.phases[p].name);
    std::map<std::string, std::pair<int64_t, int64_t>> per_agent;
    for (int round = 0; round < s.phases[p].auto_rounds; ++round) {
      for (const std::string& id : s.phases[p].agents) {
        const auto& [to, msgs] = fake.requests[request++];
        EXPECT_EQ(to, "scenario/g/" + id);
        const int64_t sent = static_cast<int64_t>(FakeServer::Chars(msgs));
        per_agent[id].first += held[id] + sent;
        per_agent[id].second += held[id];
        held[id] += sent + static_cast<int64_t>(id.size() + 2);  // its reply "id#N"
      }
    }
    int64_t phase_prefilled = 0;
    for (const auto& [id, pc] : per_agent) {
      const nlohmann::json& a = phase["agents"][id];
      EXPECT_EQ(a["prompt_tokens"], pc.first) << id;
      EXPECT_EQ(a["cached_tokens"], pc.second) << id;
      EXPECT_EQ(a["prefilled_tokens"], pc.first - pc.second) << id;
      EXPECT_EQ(a["turns"], s.phases[p].auto_rounds);
      EXPECT_DOUBLE_EQ(a["ttft_ms"].get<double>(), 2.0);
      phase_prefilled += pc.first - pc.second;
      prompt += pc.first;
      cached += pc.second;
    }
    EXPECT_EQ(phase["prefilled_tokens"], phase_prefilled);
  }
  EXPECT_EQ(report["totals"]["prompt_tokens"], prompt);
  EXPECT_EQ(report["totals"]["cached_tokens"], cached);
  EXPECT_GT(cached, 0);
}

TEST(ScenarioRunner, PermanentAgentsResumeAndEphemeralOnesAreDeleted) {
  const Scenario s = Gossip();
  FakeServer fake;
  RunOptions o;
  ASSERT_TRUE(RunScenario(s, &fake, o).ok());
  EXPECT_EQ(fake.opened_memory["scenario/g/eve"]["policy"], "memart");
  EXPECT_TRUE(fake.opened_memory["scenario/g/alice"].is_null());
  // Eve (ephemeral) was deleted before and after; the others stay.
  EXPECT_EQ(fake.deleted, (std::vector<std::string>{"scenario/g/eve", "scenario/g/eve"}));
  EXPECT_EQ(fake.agents.count("scenario/g/eve"), 0u);
  ASSERT_EQ(fake.agents.count("scenario/g/alice"), 1u);

  // A second run continues Alice's and Bob's memories: no system prompt again, and their first
  // turn reads everything the first run left as cached.
  const int64_t alice_held =
      static_cast<int64_t>(FakeServer::Chars(fake.agents["scenario/g/alice"].held));
  const size_t first_run = fake.requests.size();
  auto r = RunScenario(s, &fake, o);
  ASSERT_TRUE(r.ok());
  const auto& [to, msgs] = fake.requests[first_run];
  EXPECT_EQ(to, "scenario/g/alice");
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].role, "user");
  EXPECT_EQ(
      r->Report(s, o)["phases"][0]["agents"]["alice"]["cached_tokens"].get<int64_t>() >= alice_held,
      true);

  // Uncached, every agent is deleted and none uses the cached run's ids.
  FakeServer plain;
  RunOptions off;
  off.cache = false;
  ASSERT_TRUE(RunScenario(s, &plain, off).ok());
  EXPECT_TRUE(plain.agents.empty());
  for (const auto& [id, memory] : plain.opened_memory) {
    EXPECT_EQ(id.rfind("scenario-nocache/g/", 0), 0u) << id;
    EXPECT_EQ(memory["policy"], "none");
  }
}

TEST(ScenarioRunner, BatchedRoundsSeeOnlyTheMessagesBeforeTheRound) {
  const Scenario s = Gossip();
  FakeServer fake;
  RunOptions o;
  o.batch = true;
  auto r = RunScenario(s, &fake, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Round 1 of phase ab: Bob does not see Alice's round-1 reply; in round 2 he does, and Alice
  // sees his round-1 reply but not her own.
  std::vector<std::string> bob_turns;
  std::vector<std::string> alice_turns;
  for (const auto& [to, msgs] : fake.requests) {
    if (to == "scenario/g/bob") bob_turns.push_back(msgs.back().content);
    if (to == "scenario/g/alice") alice_turns.push_back(msgs.back().content);
  }
  ASSERT_GE(bob_turns.size(), 2u);
  EXPECT_EQ(bob_turns[0].find("alice#1"), std::string::npos) << bob_turns[0];
  EXPECT_EQ(bob_turns[1], "Alice: alice#1\nYour turn, Bob.");
  EXPECT_EQ(alice_turns[1], "Bob: bob#1\nYour turn, Alice.");
  EXPECT_EQ(r->phases[0].messages.size(), 4u);
}

// Replies that start with the speaker's own name reach the others and the transcript without it.
class NamingServer : public FakeServer {
 public:
  Result<ChatReply> Chat(const std::string& id, const std::vector<ChatMessage>& messages,
                         int max_tokens, double temperature) override {
    auto reply = FakeServer::Chat(id, messages, max_tokens, temperature);
    if (reply.ok() && id.ends_with("/g/alice")) reply->text = " Alice: hi  \n";
    return reply;
  }
};

TEST(ScenarioRunner, OthersSeeARepliesTextWithoutItsSpeakersName) {
  const Scenario s = Gossip();
  NamingServer fake;
  auto r = RunScenario(s, &fake, RunOptions());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->phases[0].messages[0].text, "hi");
  EXPECT_NE(fake.SentTo("scenario/g/bob").find("Alice: hi\nYour turn, Bob."), std::string::npos);
  // Alice's own conversation keeps what she said as she said it (resent whole when uncached).
  NamingServer plain;
  RunOptions off;
  off.cache = false;
  ASSERT_TRUE(RunScenario(s, &plain, off).ok());
  EXPECT_NE(plain.SentTo("scenario-nocache/g/alice").find("assistant:  Alice: hi  \n"),
            std::string::npos);
}

TEST(ScenarioRunner, AFailedTurnStopsTheRunNamingThePhaseAndAgent) {
  const Scenario s = Gossip();
  FakeServer fake;
  fake.fail_on = 5;  // phase ae's second request: Eve's first turn
  auto r = RunScenario(s, &fake, RunOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(r.status().message().find("phase 'ae'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("agent 'eve'"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kvmem::scenario
