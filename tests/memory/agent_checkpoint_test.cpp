// AgentStore checkpoints: an agent's earlier conversations kept beside its current one, sharing
// its immutable block files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "agent_store_test_util.h"
#include "memory/store/agent_store.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::AppendRandomRows;
using testing::BlockFiles;
using testing::ExpectSameRows;
using testing::Geometry;
using testing::Manifest;
using testing::OpenStore;
using testing::TempDir;
using testing::Tokens;

bool Exists(const AgentStore& store, const AgentKey& key, const std::string& file) {
  return std::filesystem::exists(store.AgentDir(key) + "/" + file);
}

std::vector<std::string> Ids(const AgentStore& store, const AgentKey& key) {
  Result<std::vector<CheckpointInfo>> l = store.ListCheckpoints(key, false);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  std::vector<std::string> ids;
  for (const CheckpointInfo& c : l.ok() ? *l : std::vector<CheckpointInfo>{}) ids.push_back(c.id);
  return ids;
}

TEST(AgentCheckpointTest, IdsAreNamesNoPathCanHide) {
  EXPECT_TRUE(IsCheckpointId("ckpt-1"));
  EXPECT_TRUE(IsCheckpointId("ckpt-123456789012345678"));
  for (const char* bad : {"", "ckpt-", "ckpt-0", "ckpt-01", "ckpt-1x", "ckpt-../manifest",
                          "ckpt-1234567890123456789", "manifest", "ckpt-1.json"}) {
    EXPECT_FALSE(IsCheckpointId(bad)) << bad;
  }
}

TEST(AgentCheckpointTest, AConversationKeptAsACheckpointLoadsAsItWasAfterTheAgentMovesOn) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(3);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0});
  kv::KvSequence seq(&pool);
  const AgentKey key{"t", "chat"};
  EXPECT_EQ(store.Checkpoint(key).status().code(), ErrorCode::kNotFound);  // nothing stored

  AppendRandomRows(&seq, 100, 0, &rng);  // blocks 48 48 4
  ASSERT_TRUE(store.Save(key, seq, Tokens(100), "conversation A").ok());
  kv::KvPool copy_pool(Geometry(), 8, pool.formats());
  kv::KvSequence a(&copy_pool);  // what A was, row for row
  {
    AgentRecord rec;
    ASSERT_TRUE(store.Load(key, &a, &rec).ok());
  }
  const std::vector<std::string> a_files = BlockFiles(Manifest(store, key));
  Result<CheckpointInfo> c = store.Checkpoint(key);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->id, "ckpt-1");
  EXPECT_EQ(c->n_tokens, 100);

  // The agent diverges: it keeps block 0 and goes on elsewhere. A's other blocks stay on disk
  // because the checkpoint names them.
  seq.Truncate(48);
  AppendRandomRows(&seq, 60, 48, &rng);
  std::vector<int32_t> b_tokens = Tokens(48);
  for (int32_t t : Tokens(60, 5)) b_tokens.push_back(t);
  Result<SaveStats> s = store.Save(key, seq, b_tokens, "conversation B");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->files_removed, 0);
  EXPECT_EQ(s->blocks_reused, 1);  // block 0 is the same file in both conversations
  for (const std::string& f : a_files) EXPECT_TRUE(Exists(store, key, f)) << f;

  Result<std::vector<CheckpointInfo>> listed = store.ListCheckpoints(key, /*with_text=*/true);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].text, "conversation A");
  EXPECT_GT((*listed)[0].bytes_on_disk, 0u);

  kv::KvPool back_pool(Geometry(), 8, pool.formats());
  kv::KvSequence back(&back_pool);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &back, &rec, "ckpt-1").ok());
  EXPECT_EQ(rec.text, "conversation A");
  EXPECT_EQ(rec.tokens, Tokens(100));
  ExpectSameRows(a, back);
  kv::KvSequence none(&back_pool);
  EXPECT_EQ(store.Load(key, &none, &rec, "ckpt-2").code(), ErrorCode::kNotFound);
  EXPECT_EQ(store.Load(key, &none, &rec, "../manifest").code(), ErrorCode::kInvalidArgument);

  // Deleting the checkpoint gives back the blocks only it named.
  ASSERT_TRUE(store.DeleteCheckpoint(key, "ckpt-1").ok());
  EXPECT_EQ(store.DeleteCheckpoint(key, "ckpt-1").code(), ErrorCode::kNotFound);
  EXPECT_TRUE(Exists(store, key, a_files[0]));  // B's block 0 too
  EXPECT_FALSE(Exists(store, key, a_files[1]));
  EXPECT_FALSE(Exists(store, key, a_files[2]));
  EXPECT_TRUE(Ids(store, key).empty());
}

TEST(AgentCheckpointTest, TrimmingDropsTheOldestButNeverTheSpared) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(4);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  const AgentKey key{"t", "chat"};
  AppendRandomRows(&seq, 10, 0, &rng);
  ASSERT_TRUE(store.Save(key, seq, Tokens(10), "x").ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store.Checkpoint(key).ok());
  EXPECT_EQ(store.TrimCheckpoints(key, 3).value(), 1);
  EXPECT_EQ(Ids(store, key), (std::vector<std::string>{"ckpt-2", "ckpt-3", "ckpt-4"}));
  ASSERT_TRUE(store.Checkpoint(key).ok());
  EXPECT_EQ(store.TrimCheckpoints(key, 3, "ckpt-2").value(), 1);  // ckpt-2 was just used
  EXPECT_EQ(Ids(store, key), (std::vector<std::string>{"ckpt-2", "ckpt-4", "ckpt-5"}));
  EXPECT_EQ(store.TrimCheckpoints(key, 1, "ckpt-2").value(), 2);
  EXPECT_EQ(Ids(store, key), (std::vector<std::string>{"ckpt-2"}));
  EXPECT_EQ(store.TrimCheckpoints(key, 0).value(), 1);
  EXPECT_TRUE(Ids(store, key).empty());
  ASSERT_TRUE(store.Checkpoint(key).ok());  // numbers never repeat while one is kept...
  EXPECT_EQ(Ids(store, key), (std::vector<std::string>{"ckpt-1"}));  // ...and restart at none
}

TEST(AgentCheckpointTest, AnUnreadableCheckpointKeepsEveryBlockAndDeleteTakesAll) {
  TempDir dir;
  const AgentKey key{"t", "chat"};
  std::vector<std::string> first;
  {
    AgentStore store = OpenStore(dir);
    std::mt19937 rng(5);
    kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kF16, kv::KvFormat::kF16});
    kv::KvSequence seq(&pool);
    AppendRandomRows(&seq, 60, 0, &rng);
    ASSERT_TRUE(store.Save(key, seq, Tokens(60), "a").ok());
    first = BlockFiles(Manifest(store, key));
    ASSERT_TRUE(store.Checkpoint(key).ok());
    std::ofstream(store.AgentDir(key) + "/ckpt-1.json", std::ios::trunc) << "{not json";
    seq.Clear();
    AppendRandomRows(&seq, 60, 0, &rng);
    Result<SaveStats> s = store.Save(key, seq, Tokens(60, 1), "b");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->files_removed, 0);  // the damaged checkpoint may name them
    for (const std::string& f : first) EXPECT_TRUE(Exists(store, key, f));
    EXPECT_TRUE(Ids(store, key).empty());  // listed: only readable ones
  }
  // Reopening (crash recovery) keeps them too; deleting the agent removes everything.
  AgentStore store = OpenStore(dir);
  for (const std::string& f : first) EXPECT_TRUE(Exists(store, key, f));
  ASSERT_TRUE(store.Delete(key).ok());
  EXPECT_FALSE(std::filesystem::exists(store.AgentDir(key)));
}

TEST(AgentCheckpointTest, ADeleteCutShortLeavesNoCheckpointBehindAfterRecovery) {
  TempDir dir;
  const AgentKey key{"t", "chat"};
  std::string agent_dir;
  {
    AgentStore store = OpenStore(dir);
    std::mt19937 rng(6);
    kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kF16, kv::KvFormat::kF16});
    kv::KvSequence seq(&pool);
    AppendRandomRows(&seq, 20, 0, &rng);
    ASSERT_TRUE(store.Save(key, seq, Tokens(20), "a").ok());
    ASSERT_TRUE(store.Checkpoint(key).ok());
    agent_dir = store.AgentDir(key);
  }
  std::filesystem::remove(agent_dir + "/manifest.json");  // Delete's first, durable step
  AgentStore store = OpenStore(dir);
  EXPECT_FALSE(std::filesystem::exists(agent_dir));
  EXPECT_FALSE(store.Contains(key));
}

}  // namespace
}  // namespace kvmem::memory::store
