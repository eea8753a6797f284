// AgentStore round trips: every KV format comes back byte for byte (raw layers, kivi4 staging,
// positions, views), unwritten rows never reach a file, a later turn writes only its new
// blocks, released sliding-window layers stay released. Bookkeeping (List / Delete / recovery /
// locking): agent_store_admin_test.cpp; corrupt and hostile stores: agent_store_corrupt_test.cpp.
#include "memory/store/agent_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "agent_store_test_util.h"
#include "memory/store/hash.h"
#include "memory/store/manifest.h"
#include "memory/store/safetensors.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::AppendRandomRows;
using testing::BlockFiles;
using testing::ExpectSameRows;
using testing::Geometry;
using testing::kAllFormats;
using testing::kFingerprint;
using testing::kVocab;
using testing::Manifest;
using testing::OpenStore;
using testing::TempDir;
using testing::Tokens;

TEST(AgentStoreTest, RoundTripEveryFormat) {
  for (kv::KvFormat f : kAllFormats) {
    for (kv::KvFormats formats : {kv::KvFormats{f, f}, kv::KvFormats{f, kv::KvFormat::kF16}}) {
      for (int n : {1, 31, 48, 100}) {
        SCOPED_TRACE(std::string(kv::KvFormatName(formats.k)) + "/" + kv::KvFormatName(formats.v) +
                     " n=" + std::to_string(n));
        TempDir dir;
        AgentStore store = OpenStore(dir);
        std::mt19937 rng(n);
        kv::KvPool src_pool(Geometry(), 8, formats);
        kv::KvSequence src(&src_pool);
        AppendRandomRows(&src, n, /*first_pos=*/5, &rng);
        const std::vector<int32_t> tokens = Tokens(n);
        const AgentKey key{"acme", "planner"};
        Result<SaveStats> s = store.Save(key, src, tokens, "the prompt \xe2\x98\x83");
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        EXPECT_EQ(s->blocks_written, (n + 47) / 48);
        EXPECT_TRUE(store.Contains(key));

        // A pool whose memory was used before, so stale bytes would show.
        kv::KvPool dst_pool(Geometry(), 8, formats);
        {
          kv::KvSequence scratch(&dst_pool);
          AppendRandomRows(&scratch, 8 * 48, 0, &rng);
        }
        kv::KvSequence dst(&dst_pool);
        AgentRecord rec;
        Status st = store.Load(key, &dst, &rec);
        ASSERT_TRUE(st.ok()) << st.ToString();
        EXPECT_EQ(rec.tokens, tokens);
        EXPECT_EQ(rec.text, "the prompt \xe2\x98\x83");
        EXPECT_EQ(rec.blocks, (n + 47) / 48);
        ExpectSameRows(src, dst);

        // Saving the loaded sequence gives byte-identical block files (same content names).
        ASSERT_TRUE(store.Save({"acme", "copy"}, dst, tokens, "the prompt \xe2\x98\x83").ok());
        EXPECT_EQ(BlockFiles(Manifest(store, {"acme", "copy"})), BlockFiles(Manifest(store, key)));
      }
    }
  }
}

// The memory policy travels in the manifest: read alone, listed, and loaded with the rows; an
// agent saved without one is full (manifests written before policies existed read the same).
// A long agent: its blocks load a window at a time (32) with their data read on several threads;
// the rows come back exactly, and a damaged block in the second window fails the whole load.
TEST(AgentStoreTest, ManyBlocksLoadExactlyAndADamagedOneFailsAll) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(3);
  const kv::KvGeometry g = Geometry(/*block_rows=*/8);
  const kv::KvFormats formats{kv::KvFormat::kKivi4, kv::KvFormat::kQ8_0};
  const int n = 70 * 8 + 5;  // 71 blocks, the last partial (kivi4 staging)
  kv::KvPool src_pool(g, 80, formats);
  kv::KvSequence src(&src_pool);
  AppendRandomRows(&src, n, /*first_pos=*/0, &rng);
  const AgentKey key{"acme", "long"};
  ASSERT_TRUE(store.Save(key, src, Tokens(n), "long").ok());

  kv::KvPool dst_pool(g, 80, formats);
  kv::KvSequence dst(&dst_pool);
  AgentRecord rec;
  Status st = store.Load(key, &dst, &rec);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(rec.blocks, 71);
  ExpectSameRows(src, dst);

  const std::vector<std::string> files = BlockFiles(Manifest(store, key));
  const std::string path = store.AgentDir(key) + "/" + files[40];
  std::vector<uint8_t> bytes = testing::ReadAll(path);
  bytes[bytes.size() / 2] ^= 1;
  testing::WriteAll(path, bytes);
  dst.Clear();
  kv::KvSequence again(&dst_pool);
  st = store.Load(key, &again, &rec);
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("block 40"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.message();
  EXPECT_EQ(again.n_rows(), 0);
  EXPECT_EQ(dst_pool.blocks_in_use(), 0);
}

TEST(AgentStoreTest, MemoryPolicyRoundTrips) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(3);
  kv::KvPool pool(Geometry(), 8, {});
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 20, 0, &rng);
  MemoryRecord policy;
  policy.policy = "memart";
  policy.config = {{"top_k", 5}, {"heads", {"1.0", "0.3"}}, {"strategy", "rr-max"}};
  policy.state = {{"scores", "AAAA"}, {"evicted", {{1, 2}, {}}}};
  const AgentKey key{"acme", "recall"}, plain{"acme", "plain"};
  ASSERT_TRUE(store.Save(key, seq, Tokens(20), "text", {}, policy).ok());
  ASSERT_TRUE(store.Save(plain, seq, Tokens(20), "text").ok());
  EXPECT_EQ(Manifest(store, plain).memory, MemoryRecord{});
  EXPECT_EQ(Manifest(store, key).memory, policy);

  Result<MemoryRecord> read = store.ReadMemory(key);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, policy);
  EXPECT_EQ(store.ReadMemory(plain)->policy, "full");
  EXPECT_EQ(store.ReadMemory({"acme", "nobody"}).status().code(), ErrorCode::kNotFound);
  auto listed = store.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].memory.policy, "full");  // sorted by id: plain, recall
  EXPECT_EQ((*listed)[1].memory.policy, "memart");
  EXPECT_EQ((*listed)[1].memory.config, policy.config);
  EXPECT_TRUE((*listed)[1].memory.state.empty());  // listings leave the state out
  kv::KvPool dst_pool(Geometry(), 8, {});
  kv::KvSequence dst(&dst_pool);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &dst, &rec).ok());
  EXPECT_EQ(rec.memory, policy);
}

// Pool memory is recycled between agents: bytes of rows a partial block has not written must
// not reach the file (they would leak another agent's rows and break content addressing).
TEST(AgentStoreTest, UnwrittenRowsAreNotLeaked) {
  for (kv::KvFormat f : kAllFormats) {
    SCOPED_TRACE(kv::KvFormatName(f));
    TempDir dir;
    AgentStore store = OpenStore(dir);
    std::vector<std::string> files;
    for (int agent = 0; agent < 2; ++agent) {
      kv::KvPool pool(Geometry(), 4, {f, f});
      std::mt19937 dirt(100 + agent);
      {
        kv::KvSequence other(&pool);  // another agent's rows, then freed
        AppendRandomRows(&other, 4 * 48, 0, &dirt);
      }
      kv::KvSequence seq(&pool);
      std::mt19937 rng(7);  // the same rows for both agents
      AppendRandomRows(&seq, 20, 0, &rng);
      const AgentKey key{"t", "a" + std::to_string(agent)};
      ASSERT_TRUE(store.Save(key, seq, Tokens(20), "x").ok());
      files.push_back(BlockFiles(Manifest(store, key)).at(0));
    }
    EXPECT_EQ(files[0], files[1]);
  }
}

TEST(AgentStoreTest, NonContiguousPositionsComeBackAsViewRuns) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(1);
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence src(&pool);
  AppendRandomRows(&src, 20, 0, &rng);
  AppendRandomRows(&src, 10, 1000, &rng);  // a re-placed span: rows 20..29 at 1000..1009
  ASSERT_TRUE(store.Save({"t", "a"}, src, Tokens(30), "x").ok());
  kv::KvPool pool2(Geometry(), 4);
  kv::KvSequence dst(&pool2);
  AgentRecord rec;
  ASSERT_TRUE(store.Load({"t", "a"}, &dst, &rec).ok());
  ExpectSameRows(src, dst);
  ASSERT_EQ(dst.view().layer(0).size(), 2u);
  EXPECT_EQ(dst.view().layer(0)[1].first_pos, 1000);
}

TEST(AgentStoreTest, LaterTurnsWriteOnlyNewBlocks) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(2);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kKivi4, kv::KvFormat::kQ8_0});
  kv::KvSequence seq(&pool);
  const AgentKey key{"t", "chat"};
  AppendRandomRows(&seq, 100, 0, &rng);  // blocks: 48 48 4
  Result<SaveStats> s = store.Save(key, seq, Tokens(100), "turn 1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->blocks_written, 3);
  const std::vector<std::string> turn1 = BlockFiles(Manifest(store, key));
  struct stat full0 {
  }, full1{};
  ASSERT_EQ(::stat((store.AgentDir(key) + "/" + turn1[0]).c_str(), &full0), 0);
  ASSERT_EQ(::stat((store.AgentDir(key) + "/" + turn1[1]).c_str(), &full1), 0);

  AppendRandomRows(&seq, 30, 100, &rng);  // 48 48 34: only the partial block changes
  s = store.Save(key, seq, Tokens(130), "turn 1 turn 2");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->blocks_written, 1);
  EXPECT_EQ(s->blocks_reused, 2);
  EXPECT_EQ(s->files_removed, 1);  // the old partial block
  const std::vector<std::string> turn2 = BlockFiles(Manifest(store, key));
  EXPECT_EQ(turn2[0], turn1[0]);
  EXPECT_EQ(turn2[1], turn1[1]);
  EXPECT_NE(turn2[2], turn1[2]);
  struct stat again {};
  ASSERT_EQ(::stat((store.AgentDir(key) + "/" + turn2[0]).c_str(), &again), 0);
  EXPECT_EQ(again.st_ino, full0.st_ino);
  EXPECT_EQ(again.st_mtim.tv_nsec, full0.st_mtim.tv_nsec);
  ASSERT_EQ(::stat((store.AgentDir(key) + "/" + turn2[1]).c_str(), &again), 0);
  EXPECT_EQ(again.st_ino, full1.st_ino);
  EXPECT_FALSE(std::filesystem::exists(store.AgentDir(key) + "/" + turn1[2]));

  AppendRandomRows(&seq, 20, 130, &rng);  // 48 48 48 6: block 2 completes, block 3 starts
  s = store.Save(key, seq, Tokens(150), "turn 1 turn 2 turn 3");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->blocks_written, 2);
  EXPECT_EQ(s->blocks_reused, 2);

  s = store.Save(key, seq, Tokens(150), "turn 1 turn 2 turn 3");  // nothing changed
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->blocks_written, 0);
  EXPECT_EQ(s->blocks_reused, 4);
  EXPECT_EQ(s->files_removed, 0);
  // manifest + 4 blocks, nothing else.
  EXPECT_EQ(testing::ListNames(store.AgentDir(key)).size(), 5u);

  // A truncated (diverged) sequence saves fewer blocks and drops the rest.
  seq.Truncate(50);
  s = store.Save(key, seq, Tokens(50), "turn 1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->blocks_reused, 1);
  EXPECT_EQ(s->files_removed, 3);
  kv::KvPool pool2(Geometry(), 8, pool.formats());
  kv::KvSequence dst(&pool2);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &dst, &rec).ok());
  ExpectSameRows(seq, dst);
}

TEST(AgentStoreTest, ReleasedSlidingWindowLayersStayReleased) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(3);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kQ4_0, kv::KvFormat::kQ4_0});
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 150, 0, &rng);
  // Layer 1 is a local layer whose window has passed the first two blocks (rows 0..95).
  EXPECT_GT(seq.ReleaseLayerThrough(1, 100), 0u);
  ASSERT_FALSE(pool.has_layer(seq.blocks()[0], 1));
  ASSERT_FALSE(pool.has_layer(seq.blocks()[1], 1));
  const AgentKey key{"t", "gemma"};
  ASSERT_TRUE(store.Save(key, seq, Tokens(150), "long").ok());
  const AgentManifest m = Manifest(store, key);
  EXPECT_EQ(m.blocks[0].released_layers, std::vector<int>{1});
  EXPECT_EQ(m.blocks[1].released_layers, std::vector<int>{1});
  EXPECT_TRUE(m.blocks[2].released_layers.empty());
  // The file of a released layer holds no tensor for it.
  const std::vector<uint8_t> f = testing::ReadAll(store.AgentDir(key) + "/" + m.blocks[0].file);
  Result<SafetensorsView> v = ParseSafetensors(f);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Find("layer.1"), nullptr);
  EXPECT_NE(v->Find("layer.0"), nullptr);

  kv::KvPool pool2(Geometry(), 8, pool.formats());
  kv::KvSequence dst(&pool2);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &dst, &rec).ok());
  ExpectSameRows(seq, dst);
  EXPECT_EQ(dst.released_through(1), 95);
  EXPECT_EQ(dst.view().n_rows(1), 150 - 96);
  EXPECT_EQ(dst.view().n_rows(0), 150);
  EXPECT_EQ(pool2.bytes_in_use(), pool.bytes_in_use());
}

TEST(AgentStoreTest, TextSpansAndNonUtf8Text) {
  TempDir dir;
  AgentStore store = OpenStore(dir);
  std::mt19937 rng(4);
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 60, 0, &rng);
  // Ends inside a character (byte-level BPE can emit half of one): stored as hex, exact bytes.
  std::string text(60, 'a');
  text += "\xe2\x98";
  std::vector<size_t> ends(60);
  for (size_t i = 0; i < 60; ++i) ends[i] = i + 1;
  ends[59] = text.size();
  const AgentKey key{"t", "bytes"};
  ASSERT_TRUE(store.Save(key, seq, Tokens(60), text, ends).ok());
  const AgentManifest m = Manifest(store, key);
  EXPECT_EQ(m.text, text);
  const std::vector<uint8_t> f = testing::ReadAll(store.AgentDir(key) + "/" + m.blocks[1].file);
  Result<SafetensorsView> v = ParseSafetensors(f);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v->FindMetadata("text_span"), "48:62");
  EXPECT_EQ(*v->FindMetadata("token_ids"), "[336,343,350,357,364,371,378,385,392,399,406,413]");
  kv::KvPool pool2(Geometry(), 4);
  kv::KvSequence dst(&pool2);
  AgentRecord rec;
  ASSERT_TRUE(store.Load(key, &dst, &rec).ok());
  EXPECT_EQ(rec.text, text);
}

}  // namespace
}  // namespace kvmem::memory::store
