#include "scenario/templates.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "scenario/scenario.h"

namespace kvmem::scenario {
namespace {

Scenario TwoAgents() {
  Scenario s;
  s.agents.push_back({"alice", "Alice", "", nullptr, true});
  s.agents.push_back({"bob", "Bob", "", nullptr, true});
  return s;
}

TEST(Templates, FindsReferencesWithTheirOffsets) {
  const std::string text = "a ${p1.messages[alice]} b ${p-2.messages[b_o_b]}";
  auto refs = FindTemplateRefs(text);
  ASSERT_TRUE(refs.ok()) << refs.status().ToString();
  ASSERT_EQ(refs->size(), 2u);
  EXPECT_EQ((*refs)[0].phase, "p1");
  EXPECT_EQ((*refs)[0].agent, "alice");
  EXPECT_EQ(text.substr((*refs)[0].begin, (*refs)[0].end - (*refs)[0].begin),
            "${p1.messages[alice]}");
  EXPECT_EQ((*refs)[1].phase, "p-2");
  EXPECT_EQ((*refs)[1].agent, "b_o_b");
  EXPECT_EQ((*refs)[1].end, text.size());
  EXPECT_TRUE(FindTemplateRefs("no references, $ and { alone")->empty());
}

TEST(Templates, RefusesMalformedReferences) {
  for (const char* bad : {"${p.messages[a]", "${p.msgs[a]}", "${.messages[a]}", "${p.messages[]}",
                          "${p messages[a]}", "x ${", "${p.messages[a b]}"}) {
    EXPECT_FALSE(FindTemplateRefs(bad).ok()) << bad;
  }
}

TEST(Templates, LabelsThePerspectiveAgentYou) {
  const Scenario s = TwoAgents();
  const std::vector<Message> m = {{"alice", "hi"}, {"bob", "hello"}, {"alice", "bye"}};
  EXPECT_EQ(FormatTranscript(m, s, "alice"), "You: hi\nBob: hello\nYou: bye");
  EXPECT_EQ(FormatTranscript(m, s, "bob"), "Alice: hi\nYou: hello\nAlice: bye");
  EXPECT_EQ(FormatTranscript({}, s, "bob"), "");
}

TEST(Templates, ResolvesEachReferenceFromItsPerspective) {
  const Scenario s = TwoAgents();
  const std::map<std::string, std::vector<Message>> phases = {
      {"one", {{"alice", "A1"}, {"bob", "B1"}}}, {"two", {{"bob", "B2"}}}};
  auto out = ResolveTemplate("[${one.messages[bob]}] then [${two.messages[alice]}] $x", s, phases);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "[Alice: A1\nYou: B1] then [Bob: B2] $x");
}

}  // namespace
}  // namespace kvmem::scenario
