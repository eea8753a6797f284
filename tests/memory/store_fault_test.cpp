// I/O fault injection for the agent store (as SQLite's test VFS): every file-system call of a
// full turn (checkpoint, save that reuses blocks and collects garbage, trim, delete of a
// checkpoint) is made to fail in turn, N = 1, 2, ... until the turn runs without reaching the
// fault. For every N each call either fails with an error or succeeds, and after a crash
// recovery (a fresh Open with the real file system) the agent loads as exactly the state
// before or exactly the state after, never a mix, with no temp files or unreferenced blocks
// left. Faulty reads during Load give an error and an empty sequence.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "agent_store_test_util.h"
#include "faulty_fs.h"
#include "memory/store/agent_store.h"
#include "memory/store/atomic_file.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::ExpectSameRows;
using testing::FaultyFs;
using testing::FsCall;
using testing::Geometry;
using testing::ListNames;
using testing::TempDir;
using testing::Tokens;

constexpr int64_t kMaxFaultPoints = 10000;  // a turn makes far fewer calls; guards the loop
const AgentKey kKey{"t", "agent"};

// The three conversations of the agent: A0 (60 rows: blocks 48+12), A (100: 48+48+4) and B
// (150: 48+48+48+6). They share block 0; A and B share block 1; A's partial block 2 is garbage
// once B is current and no checkpoint names it.
class StoreFaultTest : public ::testing::Test {
 protected:
  static constexpr int kSizes[] = {60, 100, 150};

  StoreFaultTest() { plain_fs_.set_real_fsync(false); }

  void SetUp() override {
    for (int s = 0; s < 3; ++s) {
      live_[s] = std::make_unique<kv::KvSequence>(&pool_);
      std::mt19937 rng(11);
      int64_t n = 0;
      for (int k = 0; k <= s; ++k) {
        testing::AppendRandomRows(live_[s].get(), kSizes[k] - static_cast<int>(n), n, &rng);
        n = kSizes[k];
      }
      // The references are the rows as a clean save and load give them back.
      TempDir scratch;
      AgentStore store = OpenPlain(scratch);
      ASSERT_TRUE(Save(store, s).ok());
      ref_[s] = std::make_unique<kv::KvSequence>(&ref_pool_);
      AgentRecord rec;
      ASSERT_TRUE(store.Load(kKey, ref_[s].get(), &rec).ok());
    }
  }

  Status Save(AgentStore& store, int s) {
    return store.Save(kKey, *live_[s], Tokens(kSizes[s]), "conversation " + std::to_string(s))
        .status();
  }

  // Stores for setting up and checking: the real calls without fsync (see faulty_fs.h).
  AgentStore OpenPlain(const TempDir& dir) {
    Result<AgentStore> s = Open(dir, &plain_fs_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  static Result<AgentStore> Open(const TempDir& dir, FileOps* fs) {
    StoreOptions o{dir.path(), testing::kFingerprint, testing::kVocab};
    o.file_ops = fs;
    return AgentStore::Open(std::move(o));
  }

  // Which conversation (0, 1, 2) `checkpoint`, or the current one, loads as: -2 when there is
  // none (NotFound), -1 (a test failure) when it fails to load or loads as none of them.
  int LoadsAs(AgentStore& store, std::string_view checkpoint = {}) {
    kv::KvSequence seq(&load_pool_);
    AgentRecord rec;
    Status st = store.Load(kKey, &seq, &rec, checkpoint);
    if (st.code() == ErrorCode::kNotFound) return -2;
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return -1;
    for (int s = 0; s < 3; ++s) {
      if (rec.tokens != Tokens(kSizes[s])) continue;
      EXPECT_EQ(rec.text, "conversation " + std::to_string(s));
      ExpectSameRows(seq, *ref_[s]);
      return s;
    }
    ADD_FAILURE() << "loaded " << rec.tokens.size() << " tokens: none of the conversations";
    return -1;
  }

  // After recovery: no temp file anywhere, and the agent's block files are exactly those its
  // manifest and checkpoints name.
  static void ExpectNoDebris(const AgentStore& store) {
    for (const std::string& n : ListNames(store.model_dir())) {
      EXPECT_NE(n.rfind(kTempPrefix, 0), 0u) << "temp file " << n;
    }
    const std::string dir = store.AgentDir(kKey);
    if (!std::filesystem::exists(dir)) return;
    std::set<std::string> named, on_disk;
    std::vector<std::string> manifests = {"manifest.json"};
    for (const std::string& n : ListNames(dir)) {
      EXPECT_NE(n.rfind(kTempPrefix, 0), 0u) << "temp file " << n;
      if (n.starts_with("kv-")) on_disk.insert(n);
      if (n.starts_with("ckpt-")) manifests.push_back(n);
    }
    for (const std::string& f : manifests) {
      if (!std::filesystem::exists(dir + "/" + f)) continue;
      const std::vector<uint8_t> bytes = testing::ReadAll(dir + "/" + f);
      Result<AgentManifest> m =
          ParseManifest({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
      ASSERT_TRUE(m.ok()) << f << ": " << m.status().ToString();
      for (const BlockEntry& b : m->blocks) named.insert(b.file);
    }
    EXPECT_EQ(on_disk, named) << "unreferenced or missing block files";
  }

  FaultyFs plain_fs_;  // never armed
  kv::KvPool pool_{Geometry(), 16, {kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0}};
  kv::KvPool ref_pool_{Geometry(), 16, pool_.formats()};
  kv::KvPool load_pool_{Geometry(), 8, pool_.formats()};
  std::unique_ptr<kv::KvSequence> live_[3];
  std::unique_ptr<kv::KvSequence> ref_[3];
};

struct FaultMode {
  const char* name = "";
  int error = EIO;
  bool short_writes = false;
};
constexpr FaultMode kModes[] = {{"EIO", EIO, false}, {"ENOSPC, short writes", ENOSPC, true}};

// The turn: keep A as ckpt-2, save B (reuses blocks 0 and 1, writes 2 and 3), trim to one
// checkpoint (ckpt-1 goes), delete ckpt-2 (its blocks are then collected). Stops at the first
// error; returns how many steps were acknowledged.
int RunTurn(AgentStore& store, const std::function<Status()>& save_b) {
  Result<CheckpointInfo> c = store.Checkpoint(kKey);
  if (!c.ok()) return 0;
  EXPECT_EQ(c->id, "ckpt-2");
  if (!save_b().ok()) return 1;
  Result<int> trimmed = store.TrimCheckpoints(kKey, 1, "ckpt-2");
  if (!trimmed.ok()) return 2;
  EXPECT_EQ(*trimmed, 1);
  if (!store.DeleteCheckpoint(kKey, "ckpt-2").ok()) return 3;
  return 4;
}

TEST_F(StoreFaultTest, EveryFaultInATurnLeavesTheStateBeforeOrAfter) {
  for (const FaultMode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    int64_t n = 1;
    for (; n <= kMaxFaultPoints; ++n) {
      SCOPED_TRACE("fault at call " + std::to_string(n));
      TempDir dir;
      {  // Before: A current, A0 kept as ckpt-1.
        AgentStore store = OpenPlain(dir);
        ASSERT_TRUE(Save(store, 0).ok());
        ASSERT_TRUE(store.Checkpoint(kKey).ok());
        ASSERT_TRUE(Save(store, 1).ok());
      }
      FaultyFs fs;
      fs.set_real_fsync(false);
      fs.set_short_writes(mode.short_writes);
      int acked = 0;
      {
        Result<AgentStore> store = Open(dir, &fs);
        ASSERT_TRUE(store.ok()) << store.status().ToString();
        fs.FailNth(n, FsCall::kAny, mode.error);
        acked = RunTurn(*store, [&] { return Save(*store, 2); });
      }  // the process "crashes": nothing more is written
      Result<AgentStore> store = Open(dir, &plain_fs_);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      ExpectNoDebris(*store);
      const int current = LoadsAs(*store);
      if (acked >= 2) {
        EXPECT_EQ(current, 2) << "an acknowledged save was lost";
      }
      if (acked < 1) {
        EXPECT_EQ(current, 1) << "a save that never ran changed the agent";
      }
      EXPECT_TRUE(current == 1 || current == 2) << current;
      const int ckpt1 = LoadsAs(*store, "ckpt-1");
      const int ckpt2 = LoadsAs(*store, "ckpt-2");
      EXPECT_TRUE(ckpt1 == 0 || ckpt1 == -2) << ckpt1;
      EXPECT_TRUE(ckpt2 == 1 || ckpt2 == -2) << ckpt2;
      if (acked < 2) {
        EXPECT_EQ(ckpt1, 0) << "ckpt-1 went before its trim";
      }
      if (acked >= 3) {
        EXPECT_EQ(ckpt1, -2) << "an acknowledged trim kept ckpt-1";
      }
      if (acked >= 1 && acked < 3) {
        EXPECT_EQ(ckpt2, 1) << "an acknowledged checkpoint was lost";
      }
      if (acked == 4) {
        EXPECT_EQ(ckpt2, -2) << "an acknowledged delete kept ckpt-2";
      }
      Result<std::vector<CheckpointInfo>> ids = store->ListCheckpoints(kKey, false);
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ(ids->size(), static_cast<size_t>((ckpt1 == 0) + (ckpt2 == 1)));
      if (::testing::Test::HasFailure()) return;
      if (!fs.fired()) {
        EXPECT_EQ(acked, 4) << "the turn failed without a fault";
        break;
      }
    }
    std::cout << "[ fault points ] turn, " << mode.name << ": " << n - 1
              << " failing calls tried, then the turn ran through (" << n << " runs)\n";
    ::testing::Test::RecordProperty(std::string("turn_fault_points_") + mode.name,
                                    static_cast<int>(n - 1));
    EXPECT_GT(n, 20) << "too few calls reached: is the store's I/O going through the layer?";
  }
}

TEST_F(StoreFaultTest, EveryFaultInAFirstSaveLeavesNoAgentOrAWholeOne) {
  int64_t n = 1;
  for (; n <= kMaxFaultPoints; ++n) {
    SCOPED_TRACE("fault at call " + std::to_string(n));
    TempDir dir;
    FaultyFs fs;
    fs.set_real_fsync(false);
    Status saved;
    {
      Result<AgentStore> store = Open(dir, &fs);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      fs.FailNth(n);
      saved = Save(*store, 2);
    }
    Result<AgentStore> store = Open(dir, &plain_fs_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ExpectNoDebris(*store);
    const int current = LoadsAs(*store);
    if (saved.ok()) {
      EXPECT_EQ(current, 2);
    }
    EXPECT_TRUE(current == 2 || current == -2) << current;
    if (current == -2) {
      EXPECT_FALSE(std::filesystem::exists(store->AgentDir(kKey)));
    }
    if (::testing::Test::HasFailure()) return;
    if (!fs.fired()) break;
  }
  std::cout << "[ fault points ] first save: " << n - 1 << " failing calls tried\n";
  ::testing::Test::RecordProperty("first_save_fault_points", static_cast<int>(n - 1));
}

TEST_F(StoreFaultTest, FaultyReadsDuringLoadGiveAnErrorAndAnEmptySequence) {
  TempDir dir;
  {
    AgentStore store = OpenPlain(dir);
    ASSERT_TRUE(Save(store, 2).ok());
  }
  for (FsCall kind : {FsCall::kAny, FsCall::kRead}) {
    FaultyFs fs;
    Result<AgentStore> store = Open(dir, &fs);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    int64_t n = 1;
    for (; n <= kMaxFaultPoints; ++n) {
      SCOPED_TRACE("fault at call " + std::to_string(n));
      fs.FailNth(n, kind, EIO);
      kv::KvSequence seq(&load_pool_);
      AgentRecord rec;
      Status st = store->Load(kKey, &seq, &rec);
      if (!fs.fired()) {
        ASSERT_TRUE(st.ok()) << st.ToString();
        ExpectSameRows(seq, *ref_[2]);
        break;
      }
      ASSERT_FALSE(st.ok()) << "a failed read was not reported";
      EXPECT_EQ(st.code(), ErrorCode::kIo) << st.ToString();
      EXPECT_NE(st.message().find("loading agent"), std::string::npos) << st.message();
      EXPECT_EQ(seq.n_rows(), 0);
      EXPECT_TRUE(seq.blocks().empty());
    }
    std::cout << "[ fault points ] load (" << (kind == FsCall::kAny ? "any call" : "reads")
              << "): " << n - 1 << " failing calls tried\n";
    EXPECT_GE(n - 1, 5);  // the manifest and four blocks are read
  }
}

}  // namespace
}  // namespace kvmem::memory::store
