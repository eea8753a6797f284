#include <string>

#include "gtest/gtest.h"
#include "scenario/scenario.h"

namespace kvmem::scenario {
namespace {

const char* kGossip = R"(
name: gossip
max_tokens: 40
agents:
  - {id: alice, name: Alice, system: "You are Alice."}
  - id: bob
    name: Bob
    system: You are Bob.
    permanent: false
    memory: {policy: memart, config: {top_k: 8, preset: "16"}}
  - {id: eve, name: Eve, system: "You are Eve."}
phases:
  - name: alice_bob
    agents: [alice, bob]
    auto_rounds: 3
    prompt: Talk about Eve.
  - name: alice_eve
    label: "Phase 2"
    agents: [alice, eve]
  - name: reunion
    agents: [alice, bob, eve]
    per_agent_prompt_templates:
      alice: "Bob: ${alice_bob.messages[alice]} Eve: ${alice_eve.messages[alice]}"
      bob: "${alice_bob.messages[bob]}"
)";

TEST(ScenarioParse, ReadsAgentsPhasesAndDefaults) {
  auto s = ParseScenario(kGossip);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "gossip");
  EXPECT_EQ(s->max_tokens, 40);
  EXPECT_EQ(s->temperature, 0.0);
  ASSERT_EQ(s->agents.size(), 3u);
  EXPECT_TRUE(s->agents[0].permanent);
  EXPECT_TRUE(s->agents[0].memory.is_null());
  EXPECT_FALSE(s->agents[1].permanent);
  EXPECT_EQ(s->agents[1].memory["policy"], "memart");
  EXPECT_EQ(s->agents[1].memory["config"]["top_k"], 8);      // a number
  EXPECT_EQ(s->agents[1].memory["config"]["preset"], "16");  // quoted: a string
  ASSERT_EQ(s->phases.size(), 3u);
  EXPECT_EQ(s->phases[0].label, "alice_bob");  // label defaults to the name
  EXPECT_EQ(s->phases[0].auto_rounds, 3);
  EXPECT_EQ(s->phases[1].label, "Phase 2");
  EXPECT_EQ(s->phases[1].auto_rounds, 1);
  EXPECT_EQ(s->phases[2].agents, (std::vector<std::string>{"alice", "bob", "eve"}));
  EXPECT_EQ(s->phases[2].templates.size(), 2u);
  EXPECT_EQ(s->FindPhase("reunion"), 2);
  EXPECT_EQ(s->FindPhase("nope"), -1);
}

// Replaces the first `from` in kGossip with `to` and returns the parse error.
std::string ErrorOf(const std::string& from, const std::string& to) {
  std::string yaml = kGossip;
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  yaml.replace(at, from.size(), to);
  auto s = ParseScenario(yaml);
  EXPECT_FALSE(s.ok()) << "accepted: " << to;
  return s.ok() ? std::string() : s.status().message();
}

TEST(ScenarioParse, RefusesBadReferencesWithTheirLine) {
  std::string e = ErrorOf("agents: [alice, eve]", "agents: [alice, mallory]");
  EXPECT_NE(e.find("unknown agent 'mallory'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 19"), std::string::npos) << e;

  e = ErrorOf("${alice_eve.messages[alice]}", "${later.messages[alice]}");
  EXPECT_NE(e.find("unknown phase 'later'"), std::string::npos) << e;
  e = ErrorOf("${alice_eve.messages[alice]}", "${reunion.messages[alice]}");
  EXPECT_NE(e.find("has not run yet"), std::string::npos) << e;
  e = ErrorOf("${alice_eve.messages[alice]}", "${alice_eve.messages[zed]}");
  EXPECT_NE(e.find("unknown agent 'zed'"), std::string::npos) << e;
  e = ErrorOf("${alice_eve.messages[alice]}", "${alice_eve.messages[bob]}");
  EXPECT_NE(e.find("'bob' was not in phase 'alice_eve'"), std::string::npos) << e;
  e = ErrorOf("${alice_eve.messages[alice]}", "${alice_eve.messages}");
  EXPECT_NE(e.find("malformed template reference"), std::string::npos) << e;
  e = ErrorOf("      bob:", "      mallory:");
  EXPECT_NE(e.find("a template for 'mallory', who is not in this phase"), std::string::npos) << e;
}

TEST(ScenarioParse, RefusesATemplateThatLeaksAPrivatePhase) {
  // Bob was not in alice_eve: even from Alice's perspective, its messages are not his to see.
  std::string e = ErrorOf("\"${alice_bob.messages[bob]}\"", "\"${alice_eve.messages[alice]}\"");
  EXPECT_NE(e.find("would show 'bob' the private phase 'alice_eve'"), std::string::npos) << e;
}

TEST(ScenarioParse, VisibleToLetsAnAgentReadAPhaseItWasNotIn) {
  std::string yaml = kGossip;
  yaml.replace(yaml.find("    label: \"Phase 2\"\n"), 0, "    visible_to: [bob]\n");
  yaml.replace(yaml.find("\"${alice_bob.messages[bob]}\""), 28, "\"${alice_eve.messages[bob]}\"");
  auto s = ParseScenario(yaml);
  ASSERT_TRUE(s.ok()) << s.status().ToString() << "\n" << yaml;
  EXPECT_EQ(s->phases[1].visible_to, (std::vector<std::string>{"bob"}));
  yaml.replace(yaml.find("visible_to: [bob]"), 17, "visible_to: [zed]");
  auto bad = ParseScenario(yaml);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("visible_to: unknown agent 'zed'"), std::string::npos);
}

TEST(ScenarioParse, RefusesMalformedFields) {
  EXPECT_NE(ErrorOf("max_tokens: 40", "max_tokens: many").find("max_tokens"), std::string::npos);
  EXPECT_NE(ErrorOf("max_tokens: 40", "colour: blue").find("unknown key 'colour'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("auto_rounds: 3", "auto_rounds: 0").find("auto_rounds"), std::string::npos);
  EXPECT_NE(ErrorOf("permanent: false", "permanent: maybe").find("permanent"), std::string::npos);
  EXPECT_NE(ErrorOf("{id: eve,", "{id: alice,").find("two agents have the id 'alice'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("name: alice_eve", "name: alice_bob").find("two phases are named"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{id: eve,", "{id: \"e v\",").find("must be 1-64 characters"),
            std::string::npos);
  EXPECT_NE(ErrorOf("name: Bob", "name: You").find("not 'You'"), std::string::npos);
  EXPECT_NE(ErrorOf("memory: {policy: memart,", "memory: {kind: memart,").find("memory"),
            std::string::npos);
  EXPECT_NE(ErrorOf("    agents: [alice, eve]", "    agents: []").find("non-empty"),
            std::string::npos);
}

TEST(ScenarioParse, RefusesWhatIsNotAScenario) {
  for (const char* bad : {"", "- a\n- b\n", "name: [unclosed", "name: x\nagents: {}\nphases: []\n",
                          "\t\"", "name: x\nagents:\n  - id: a\n"}) {
    auto s = ParseScenario(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument) << bad;
    }
  }
  // Nesting deep enough to exhaust a recursive parser's stack is an error, not a crash.
  const std::string deep(100000, '[');
  EXPECT_FALSE(ParseScenario("name: " + deep).ok());
  EXPECT_FALSE(ParseScenario(std::string((1 << 20) + 1, ' ')).ok());  // over 1 MiB
}

TEST(ScenarioParse, LoadScenarioNamesAMissingFile) {
  auto s = LoadScenario("/nonexistent/dir/x.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace kvmem::scenario
