// AgentStore bookkeeping: List / Contains / Delete, recovery after a crash when the store
// opens, the one-process lock, concurrent agents, and the default root.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent_store_test_util.h"
#include "memory/store/agent_store.h"
#include "memory/store/hash.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::AppendRandomRows;
using testing::Geometry;
using testing::kFingerprint;
using testing::kVocab;
using testing::OpenStore;
using testing::TempDir;
using testing::Tokens;

TEST(AgentStoreTest, ListContainsDelete) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(5);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kQ8_0, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 50, 0, &rng);
  for (const AgentKey& k :
       {AgentKey{"zeta", "b"}, AgentKey{"alpha", "z"}, AgentKey{"alpha", "a"}}) {
    ASSERT_TRUE(store.Save(k, seq, Tokens(50), "hi").ok());
  }
  Result<std::vector<AgentInfo>> list = store.List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].key, (AgentKey{"alpha", "a"}));
  EXPECT_EQ((*list)[1].key, (AgentKey{"alpha", "z"}));
  EXPECT_EQ((*list)[2].key, (AgentKey{"zeta", "b"}));
  uint64_t on_disk = 0;
  for (const auto& e : std::filesystem::directory_iterator(store.AgentDir({"zeta", "b"}))) {
    on_disk += e.file_size();
  }
  EXPECT_EQ((*list)[2].bytes_on_disk, on_disk);
  EXPECT_EQ((*list)[2].n_tokens, 50);
  EXPECT_EQ((*list)[2].formats, pool.formats());
  EXPECT_GT((*list)[2].last_use_unix_ms, 0);
  EXPECT_TRUE((*list)[2].status.ok());

  EXPECT_TRUE(store.Contains({"alpha", "z"}));
  EXPECT_FALSE(store.Contains({"alpha", "y"}));
  EXPECT_FALSE(store.Contains({"..", "z"}));
  ASSERT_TRUE(store.Delete({"alpha", "z"}).ok());
  EXPECT_FALSE(store.Contains({"alpha", "z"}));
  EXPECT_FALSE(std::filesystem::exists(store.AgentDir({"alpha", "z"})));
  Status st = store.Delete({"alpha", "z"});
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("'alpha/z' has no stored cache"), std::string::npos) << st.message();
  kv::KvSequence dst(&pool);
  AgentRecord rec;
  st = store.Load({"alpha", "z"}, &dst, &rec);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("no stored cache"), std::string::npos) << st.message();
  EXPECT_EQ(store.List()->size(), 2u);
  EXPECT_TRUE(store.Contains({"alpha", "a"}));  // others untouched
}

// The Responses API's records: keyed by tenant and id, replaced whole, kept by a reopen (Open
// cleans agent directories, not the records' one), gone after DeleteResponse.
TEST(AgentStoreTest, ResponseRecordsSurviveReopen) {
  TempDir dir;
  std::string model_dir;
  {
    AgentStore store = OpenStore(dir);
    model_dir = store.model_dir();
    ASSERT_TRUE(store.SaveResponse({"t", "resp_1"}, R"({"v":1})").ok());
    ASSERT_TRUE(store.SaveResponse({"t", "resp_1"}, R"({"v":2})").ok());
    ASSERT_TRUE(store.SaveResponse({"t", "resp_2"}, R"({"v":3})").ok());
    EXPECT_EQ(store.LoadResponse({"u", "resp_1"}).status().code(), ErrorCode::kNotFound);
    EXPECT_EQ(store.LoadResponse({"t", "bad\n"}).status().code(), ErrorCode::kNotFound);
    EXPECT_FALSE(store.SaveResponse({"t", ""}, "{}").ok());
    for (const auto& e : std::filesystem::directory_iterator(model_dir + "/responses")) {
      const std::string name = e.path().filename().string();
      EXPECT_EQ(name.find("resp_"), std::string::npos) << name;  // no client string on disk
    }
  }
  // A crashed save's temp file goes; the records stay.
  const std::string temp = model_dir + "/responses/.kvmem-tmp.x.json.123";
  { std::ofstream(temp) << "partial"; }
  AgentStore store = OpenStore(dir);
  EXPECT_FALSE(std::filesystem::exists(temp));
  Result<std::string> one = store.LoadResponse({"t", "resp_1"});
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, R"({"v":2})");
  EXPECT_EQ(*store.LoadResponse({"t", "resp_2"}), R"({"v":3})");
  ASSERT_TRUE(store.DeleteResponse({"t", "resp_1"}).ok());
  EXPECT_EQ(store.LoadResponse({"t", "resp_1"}).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store.DeleteResponse({"t", "resp_1"}).code(), ErrorCode::kNotFound);
  EXPECT_TRUE(store.LoadResponse({"t", "resp_2"}).ok());
}

TEST(AgentStoreTest, OpenCleansUpAfterACrash) {
  TempDir dir;
  const AgentKey key{"t", "survivor"};
  std::string agent_dir, model_dir;
  {
    AgentStore store = OpenStore(dir);
    std::mt19937 rng(6);
    kv::KvPool pool(Geometry(), 4);
    kv::KvSequence seq(&pool);
    AppendRandomRows(&seq, 60, 0, &rng);
    ASSERT_TRUE(store.Save(key, seq, Tokens(60), "x").ok());
    agent_dir = store.AgentDir(key);
    model_dir = store.model_dir();
  }
  const std::vector<uint8_t> junk = {1, 2, 3};
  testing::WriteAll(agent_dir + "/.kvmem-tmp.manifest.json.123abc", junk);
  testing::WriteAll(model_dir + "/.kvmem-tmp.x.1", junk);
  const std::string orphan = "kv-" + Xxh128Hex(std::string_view("orphan")) + ".safetensors";
  testing::WriteAll(agent_dir + "/" + orphan, junk);  // written before a crash, never acknowledged
  const std::string no_manifest = model_dir + "/" + Xxh128Hex(std::string_view("half"));
  std::filesystem::create_directory(no_manifest);  // a first save that crashed
  testing::WriteAll(no_manifest + "/" + orphan, junk);
  const std::vector<std::string> before = testing::ListNames(agent_dir);

  AgentStore store = OpenStore(dir);
  EXPECT_EQ(testing::ListNames(agent_dir).size(), before.size() - 2);
  EXPECT_FALSE(std::filesystem::exists(agent_dir + "/" + orphan));
  EXPECT_FALSE(std::filesystem::exists(model_dir + "/.kvmem-tmp.x.1"));
  EXPECT_FALSE(std::filesystem::exists(no_manifest));
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence seq(&pool);
  AgentRecord rec;
  EXPECT_TRUE(store.Load(key, &seq, &rec).ok());
}

// Ids clients send (e-mail, '/', Unicode, 256 bytes) round-trip, and the store lists them as
// sent; two ids one byte apart stay two agents; no id becomes a path.
TEST(AgentStoreTest, AnyIdIsOneAgentAndNeverAPath) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(9);
  kv::KvPool pool(Geometry(), 8);
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 10, 0, &rng);
  const std::vector<std::string> ids = {"alice@example.com", "alice@example.con", "../../x",
                                        "/etc", "\xe7\x94\xa8\xe6\x88\xb7 1",
                                        std::string(kMaxAgentIdBytes, 'z')};
  for (const std::string& id : ids) ASSERT_TRUE(store.Save({"t", id}, seq, Tokens(10), id).ok());
  Result<std::vector<AgentInfo>> list = store.List();
  ASSERT_TRUE(list.ok());
  std::set<std::string> listed;
  for (const AgentInfo& a : *list) listed.insert(a.key.id);
  EXPECT_EQ(listed, std::set<std::string>(ids.begin(), ids.end()));
  for (const std::string& id : ids) {
    kv::KvSequence dst(&pool);
    AgentRecord rec;
    ASSERT_TRUE(store.Load({"t", id}, &dst, &rec).ok()) << id;
    EXPECT_EQ(rec.text, id);  // each its own agent
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    for (const std::string& id : ids) EXPECT_EQ(name.find(id), std::string::npos) << name;
  }
}

// Stores written before directory names were keyed named them LegacyAgentDirName(key); Open
// moves each to its keyed name, so those agents load as before.
TEST(AgentStoreTest, OpenMovesLegacyDirectoriesToTheirKeyedNames) {
  TempDir dir;
  const AgentKey key{"default", "ada"};
  std::mt19937 rng(10);
  kv::KvPool pool(Geometry(), 8);
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 60, 0, &rng);
  std::string model_dir;
  {
    AgentStore store = OpenStore(dir);
    ASSERT_TRUE(store.Save(key, seq, Tokens(60), "legacy").ok());
    model_dir = store.model_dir();
    // As the old layout had it: the XXH3 name, and no secret yet.
    std::filesystem::rename(store.AgentDir(key), model_dir + "/" + LegacyAgentDirName(key));
    std::filesystem::remove(model_dir + "/name-secret");
  }
  AgentStore store = OpenStore(dir);
  EXPECT_FALSE(std::filesystem::exists(model_dir + "/" + LegacyAgentDirName(key)));
  EXPECT_TRUE(std::filesystem::exists(store.AgentDir(key)));
  kv::KvSequence dst(&pool);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &dst, &rec).ok());
  EXPECT_EQ(rec.text, "legacy");
  testing::ExpectSameRows(seq, dst);
  ASSERT_EQ(store.List()->size(), 1u);
}

TEST(AgentStoreTest, OneProcessPerModelDirectory) {
  TempDir dir;
  AgentStore first = OpenStore(dir);
  Result<AgentStore> second = AgentStore::Open({dir.path(), kFingerprint, kVocab});
  EXPECT_EQ(second.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  // Another model has its own directory and lock.
  EXPECT_TRUE(AgentStore::Open({dir.path(), Xxh128Hex(std::string_view("model B")), kVocab}).ok());
  EXPECT_EQ(AgentStore::Open({dir.path(), "not-hex", kVocab}).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(AgentStore::Open({dir.path(), kFingerprint, 0}).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(AgentStoreTest, ConcurrentAgents) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      kv::KvPool pool(Geometry(), 8);  // KvPool is single-threaded: one per thread
      kv::KvSequence seq(&pool);
      const AgentKey key{"t", "agent" + std::to_string(t % 2)};  // two threads per agent
      for (int turn = 0; turn < 3 && results[t].ok(); ++turn) {
        AppendRandomRows(&seq, 30, seq.n_rows(), &rng);
        Result<SaveStats> s = store.Save(key, seq, Tokens(seq.n_rows(), t), "x");
        results[t] = s.status();
        kv::KvSequence back(&pool);
        AgentRecord rec;
        if (results[t].ok()) results[t] = store.Load(key, &back, &rec);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(store.List()->size(), 2u);
}

// The store under $XDG_DATA_HOME, a Redis store's block cache under $XDG_CACHE_HOME; each
// falls back to its place under $HOME when the variable is not an absolute path.
TEST(AgentStoreTest, DefaultDirectoriesFollowXdg) {
  struct Case {
    const char* var;
    Result<std::string> (*dir)();
    std::string set, under_home;
  };
  const Case cases[] = {{"XDG_DATA_HOME", &DefaultStoreRoot, "/data/x/kvmem", "/.local/share/kvmem"},
                        {"XDG_CACHE_HOME", &DefaultStoreCacheDir, "/data/x/kvmem/store-cache",
                         "/.cache/kvmem/store-cache"}};
  for (const Case& c : cases) {
    const char* old = std::getenv(c.var);
    const std::string saved = old ? old : "";
    ::setenv(c.var, "/data/x", 1);
    EXPECT_EQ(*c.dir(), c.set);
    ::setenv(c.var, "relative/ignored", 1);
    const char* home = std::getenv("HOME");
    if (home != nullptr && home[0] == '/') {
      EXPECT_EQ(*c.dir(), std::string(home) + c.under_home);
    }
    if (old) {
      ::setenv(c.var, saved.c_str(), 1);
    } else {
      ::unsetenv(c.var);
    }
  }
}

}  // namespace
}  // namespace kvmem::memory::store
