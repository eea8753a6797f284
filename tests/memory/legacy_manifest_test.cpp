// Manifests written before the memory-policy seam still load (tests/data/memory/legacy_agents:
// a full and a retrieval agent, written by the release before the change): the full one as
// `full`, the retrieval one as `memart` with its settings; a third turn over each replies as a
// runtime of today that lived the same three turns; and today's code replies to the first two
// turns as that release did. The next save writes the new manifest shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "agent_runtime_fixture.h"
#include "memory/store/agent_id.h"

namespace kvmem::memory {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(KVMEM_TESTDATA_DIR) + "/memory/legacy_agents";

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

class LegacyManifestTest : public testing::AgentRuntimeFixture {
 protected:
  void SetUp() override {
    AgentRuntimeFixture::SetUp();
    std::ifstream in(kData + "/turns.json");
    std::stringstream ss;
    ss << in.rdbuf();
    turns_ = Json::parse(ss.str());
  }

  // Copies the stored agent `name` into the fixture's store; returns its key.
  store::AgentKey Install(const std::string& name) {
    const Json& a = turns_[name];
    const store::AgentKey key{a["key"]["tenant"], a["key"]["id"]};
    const std::string dir = store_->AgentDir(key);
    fs::create_directories(dir);
    for (const auto& f : fs::directory_iterator(kData + "/" + name)) {
      fs::copy_file(f.path(), dir + "/" + f.path().filename().string());
    }
    return key;
  }

  // Prompt of turn t (0, 1) as the old release sent it, and its greedy reply then.
  std::string Prompt(const std::string& name, int t) const {
    return Unhex(turns_[name]["turns"][t]["prompt_hex"]);
  }
  std::string OldReply(const std::string& name, int t) const {
    return Unhex(turns_[name]["turns"][t]["reply_hex"]);
  }

  // Replays turns 1 and 2 on `fresh` (checking the old release's replies), then a third turn
  // on both it and the legacy agent `key` of `loaded`: same reply and rows.
  void ExpectThirdTurnAsFresh(const std::string& name, const store::AgentKey& key,
                              AgentRuntime& loaded, AgentRuntime& fresh,
                              const store::AgentKey& fresh_key) {
    std::string reply;
    for (int t = 0; t < 2; ++t) {
      Turn(fresh, &fresh_key, Prompt(name, t), &reply);
      EXPECT_EQ(reply, OldReply(name, t)) << name << " turn " << t;
    }
    const std::string third = Prompt(name, 1) + OldReply(name, 1) + " And where is it now?";
    std::string old_reply, fresh_reply;
    const TurnResult a = Turn(loaded, &key, third, &old_reply);
    const TurnResult b = Turn(fresh, &fresh_key, third, &fresh_reply);
    EXPECT_EQ(a.prompt.tier, Tier::kWarm);
    EXPECT_EQ(old_reply, fresh_reply);
    EXPECT_EQ(a.kv_tokens, b.kv_tokens);
    EXPECT_EQ(a.prompt.cached_tokens, b.prompt.cached_tokens);
    EXPECT_EQ(a.memory_report, b.memory_report);
  }

  Json turns_;
};

TEST_F(LegacyManifestTest, FullAgentLoadsAsFull) {
  const store::AgentKey key = Install("full");
  auto before = store_->ReadMemory(key);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->policy, "full");  // no "memory" key at all
  auto rt = Runtime();
  auto listed = rt->Get(key);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->policy, "full");
  EXPECT_EQ(listed->tokens, 109);
  auto fresh = Runtime();
  ExpectThirdTurnAsFresh("full", key, *rt, *fresh, {"t", "new-full"});
  auto after = store_->ReadMemory(key);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->legacy);
}

TEST_F(LegacyManifestTest, RetrievalAgentLoadsAsMemartWithItsSettings) {
  const store::AgentKey key = Install("memart");
  auto before = store_->ReadMemory(key);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_TRUE(before->legacy);
  EXPECT_EQ(before->policy, "retrieval");
  auto rt = Runtime();
  auto listed = rt->Get(key);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->policy, "memart");
  const Json& c = listed->config;
  EXPECT_EQ(c["block_size"], 8);
  EXPECT_EQ(c["top_k"], 2);
  EXPECT_EQ(c["neighbors"], 1);
  EXPECT_EQ(c["strategy"], "softmax-sum");
  EXPECT_EQ(c["heads"], Json::array());
  EXPECT_EQ(c["preset"], "paper");

  auto fresh = Runtime();
  const store::AgentKey fresh_key{"t", "new-memart"};
  ASSERT_TRUE(fresh->CreateAgent(fresh_key, *fresh->ValidateMemory("memart", c)).ok());
  ExpectThirdTurnAsFresh("memart", key, *rt, *fresh, fresh_key);
  auto after = store_->ReadMemory(key);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->legacy);
  EXPECT_EQ(after->policy, "memart");
  EXPECT_EQ(after->config, c);
}

// A legacy retrieval manifest with settings the policy refuses is Corrupt, and its files stay.
TEST_F(LegacyManifestTest, LegacySettingsOutOfBoundsAreRefused) {
  const store::AgentKey key = Install("memart");
  const std::string manifest = store_->AgentDir(key) + "/manifest.json";
  std::ifstream in(manifest);
  std::stringstream ss;
  ss << in.rdbuf();
  Json m = Json::parse(ss.str());
  m["memory"]["top_k"] = 0;
  std::ofstream(manifest) << m.dump();
  auto rt = Runtime();
  TurnParams p;
  auto r = rt->RunTurn(&key, Prompt("memart", 0), p, {});
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("top_k"), std::string::npos) << r.status().ToString();
  EXPECT_TRUE(store_->Contains(key));
}

}  // namespace
}  // namespace kvmem::memory
