// AgentStore against damaged and hostile stores: truncated and bit-flipped block files (with
// and without a manifest rewritten to match them), a wrong model, wrong formats and geometry,
// oversized header lengths, manifests with wrong types, out-of-vocabulary ids, missing or
// swapped blocks, and bad agent ids. Every case must fail with the expected code and a message
// naming the problem, and leave the sequence (and its pool) empty.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "memory/store/agent_store.h"
#include "memory/store/hash.h"
#include "memory/store/json_util.h"
#include "memory/store/manifest.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::TempDir;

const std::string kFingerprint = Xxh128Hex(std::string_view("model A"));
constexpr int32_t kVocab = 1000;
const AgentKey kKey{"acme", "victim"};

// Small blocks so every byte of a file can be damaged in turn: 1 KiB per layer in f16.
kv::KvGeometry Geometry() { return {2, 1, 32, 32, /*block_rows=*/8}; }

class CorruptStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(); }

  // A fresh store holding kKey with 12 rows (a whole block and a partial one).
  void Reset(kv::KvFormats formats = {}) {
    store_.reset();
    dir_ = std::make_unique<TempDir>();
    Result<AgentStore> s = AgentStore::Open({dir_->path(), kFingerprint, kVocab});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::make_unique<AgentStore>(std::move(s).value());
    formats_ = formats;
    kv::KvPool pool(Geometry(), 4, formats);
    kv::KvSequence seq(&pool);
    std::mt19937 rng(1);
    testing::AppendRandomRows(&seq, 12, 0, &rng);
    std::vector<int32_t> tokens(12);
    for (int i = 0; i < 12; ++i) tokens[i] = 10 * i;
    ASSERT_TRUE(store_->Save(kKey, seq, tokens, "hello").ok());
    agent_dir_ = store_->AgentDir(kKey);
    manifest_text_ = Read("manifest.json");
  }

  std::string Read(const std::string& name) {
    const std::vector<uint8_t> b = testing::ReadAll(agent_dir_ + "/" + name);
    return {b.begin(), b.end()};
  }
  void Write(const std::string& name, const std::string& bytes) {
    testing::WriteAll(agent_dir_ + "/" + name, {bytes.begin(), bytes.end()});
  }
  Json Manifest() { return Json::parse(Read("manifest.json")); }
  std::string BlockName(int i) { return Manifest()["blocks"][i]["file"].get<std::string>(); }
  void RestoreManifest() { Write("manifest.json", manifest_text_); }

  void EditManifest(const std::function<void(Json&)>& edit) {
    Json j = Json::parse(manifest_text_);
    edit(j);
    Write("manifest.json", j.dump());
  }

  // Replaces block i with `bytes` the way a hostile writer with access to the store could:
  // under its own content name, with the manifest's size and checksum updated to match.
  void ReplaceBlockConsistently(int i, const std::string& bytes) {
    const std::string sum = Xxh128Hex(std::string_view(bytes));
    Write(BlockFileName(sum), bytes);
    EditManifest([&](Json& j) {
      j["blocks"][i]["file"] = BlockFileName(sum);
      j["blocks"][i]["xxh3_128"] = sum;
      j["blocks"][i]["bytes"] = bytes.size();
    });
  }

  // Loads kKey into a fresh sequence of `geo`/`formats`; returns the status after checking
  // that a failure left nothing behind.
  Status Load(kv::KvGeometry geo = Geometry(), std::optional<kv::KvFormats> formats = {}) {
    kv::KvPool pool(geo, 4, formats.value_or(formats_));
    kv::KvSequence seq(&pool);
    AgentRecord rec;
    Status st = store_->Load(kKey, &seq, &rec);
    if (!st.ok()) {
      EXPECT_EQ(seq.n_rows(), 0) << st.ToString();
      EXPECT_EQ(pool.blocks_in_use(), 0) << st.ToString();
      for (int l = 0; l < geo.n_layers; ++l) {
        EXPECT_EQ(seq.view().n_rows(l), 0) << st.ToString();
        EXPECT_EQ(seq.released_through(l), kv::kNoPosition) << st.ToString();
      }
    }
    return st;
  }

  void ExpectLoadError(ErrorCode code, const std::string& needle) {
    Status st = Load();
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos)
        << "message: " << st.message() << "\nexpected to contain: " << needle;
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<AgentStore> store_;
  kv::KvFormats formats_;
  std::string agent_dir_;
  std::string manifest_text_;
};

TEST_F(CorruptStoreTest, IntactStoreLoads) { EXPECT_TRUE(Load().ok()); }

TEST_F(CorruptStoreTest, TruncatedBlockAtEveryLength) {
  for (int b : {0, 1}) {
    const std::string name = BlockName(b);
    const std::string full = Read(name);
    for (size_t n = 0; n < full.size(); ++n) {
      SCOPED_TRACE("block " + std::to_string(b) + " truncated to " + std::to_string(n));
      Write(name, full.substr(0, n));
      ExpectLoadError(ErrorCode::kCorrupt,
                      "bytes, the manifest says " + std::to_string(full.size()));
    }
    Write(name, full);
  }
  EXPECT_TRUE(Load().ok());
}

// The manifest rewritten to match the truncated file: the framing checks must catch it.
TEST_F(CorruptStoreTest, TruncatedBlockWithMatchingManifest) {
  const std::string full = Read(BlockName(1));
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n));
    ReplaceBlockConsistently(1, full.substr(0, n));
    Status st = Load();
    EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.ToString();
    RestoreManifest();
  }
}

TEST_F(CorruptStoreTest, BitFlipsFailTheChecksum) {
  const std::string name = BlockName(0);
  const std::string full = Read(name);
  for (size_t i = 0; i < full.size(); ++i) {
    std::string f = full;
    f[i] = static_cast<char>(f[i] ^ (1 << (i % 8)));
    Write(name, f);
    ExpectLoadError(ErrorCode::kCorrupt, "checksum");
  }
  Write(name, full);
  EXPECT_TRUE(Load().ok());
}

// Flips in the header with a matching checksum: framing, metadata and shape checks must catch
// every one (data bytes carry no structure to check; the checksum is their protection).
TEST_F(CorruptStoreTest, HeaderBitFlipsWithMatchingManifest) {
  const std::string full = Read(BlockName(0));
  uint64_t header_len = 0;
  std::memcpy(&header_len, full.data(), 8);
  for (size_t i = 0; i < 8 + header_len; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = full;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      ReplaceBlockConsistently(0, f);
      Status st = Load();
      EXPECT_TRUE(st.code() == ErrorCode::kCorrupt || st.code() == ErrorCode::kUnsupported)
          << "byte " << i << " bit " << bit << ": " << st.ToString();
    }
  }
}

// A failure after blocks with released layers were applied still leaves nothing behind.
// Positions are data bytes, so a consistent manifest lets any through the checksum. A run
// ending at INT64_MAX followed by another run overflowed the view's contiguity check on load
// (fuzz/safetensors_block_fuzz.cpp); positions past +-2^62 are refused before the pool sees them.
TEST_F(CorruptStoreTest, PositionsNearTheInt64LimitAreRefused) {
  const std::string full = Read(BlockName(1));  // rows 8..11; "positions" is the last tensor
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const std::vector<int64_t>& positions :
       {std::vector<int64_t>{8, kMax, 5, 6}, std::vector<int64_t>{8, 9, 10, kMax},
        std::vector<int64_t>{8, int64_t{1} << 62, 0, 1},
        std::vector<int64_t>{8, -(int64_t{1} << 62), 0, 1}}) {
    std::string f = full;
    std::memcpy(f.data() + f.size() - 32, positions.data(), 32);
    ReplaceBlockConsistently(1, f);
    ExpectLoadError(ErrorCode::kCorrupt, "is outside (-2^62, 2^62)");
    RestoreManifest();
  }
  const std::vector<int64_t> far = {8, (int64_t{1} << 62) - 1, -(int64_t{1} << 62) + 1, 1};
  std::string f = full;
  std::memcpy(f.data() + f.size() - 32, far.data(), 32);
  ReplaceBlockConsistently(1, f);
  EXPECT_TRUE(Load().ok());
}

TEST_F(CorruptStoreTest, FailureAfterReleasedLayersLeavesNoTrace) {
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence seq(&pool);
  std::mt19937 rng(3);
  testing::AppendRandomRows(&seq, 20, 0, &rng);  // blocks of 8, 8, 4 rows
  seq.ReleaseLayerThrough(0, 10);                // layer 0 of block 0 (rows 0..7)
  ASSERT_TRUE(store_->Save(kKey, seq, std::vector<int32_t>(20, 1), "x").ok());
  ASSERT_EQ(Manifest()["blocks"][0]["released_layers"], Json::array({0}));
  ASSERT_TRUE(Load().ok());
  const std::string name = BlockName(2);
  std::string f = Read(name);
  f.back() = static_cast<char>(f.back() ^ 1);
  Write(name, f);
  ExpectLoadError(ErrorCode::kCorrupt, "block 2");
}

TEST_F(CorruptStoreTest, OversizedHeaderLength) {
  const std::string full = Read(BlockName(0));
  for (uint64_t len : {uint64_t{1} << 40, uint64_t{1} << 20, ~uint64_t{0}}) {
    std::string f = full;
    std::memcpy(f.data(), &len, 8);
    ReplaceBlockConsistently(0, f);
    ExpectLoadError(ErrorCode::kCorrupt, "exceeds the limit");
    RestoreManifest();
  }
}

TEST_F(CorruptStoreTest, WrongModel) {
  // Same 16-hex prefix, so the same directory: only the manifest can tell them apart.
  const std::string other = kFingerprint.substr(0, 16) + std::string(16, '0');
  store_.reset();
  Result<AgentStore> s = AgentStore::Open({dir_->path(), other, kVocab});
  ASSERT_TRUE(s.ok());
  store_ = std::make_unique<AgentStore>(std::move(s).value());
  ExpectLoadError(ErrorCode::kFailedPrecondition, "computed by model " + kFingerprint);
  // Another model entirely looks in its own directory.
  store_.reset();
  s = AgentStore::Open({dir_->path(), Xxh128Hex(std::string_view("model B")), kVocab});
  ASSERT_TRUE(s.ok());
  store_ = std::make_unique<AgentStore>(std::move(s).value());
  ExpectLoadError(ErrorCode::kNotFound, "no stored cache");
}

TEST_F(CorruptStoreTest, WrongFormatOrGeometry) {
  Status st = Load(Geometry(), kv::KvFormats{kv::KvFormat::kQ8_0, kv::KvFormat::kF16});
  EXPECT_EQ(st.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("formats are k=f16 v=f16, the pool stores k=q8_0 v=f16"),
            std::string::npos)
      << st.message();
  kv::KvGeometry g = Geometry();
  g.n_layers = 3;
  st = Load(g);
  EXPECT_EQ(st.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("n_layers 2 (the live pool has 3)"), std::string::npos)
      << st.message();
  g = Geometry();
  g.block_rows = 16;
  st = Load(g);
  EXPECT_NE(st.message().find("block_rows 8 (the live pool has 16)"), std::string::npos)
      << st.message();
  g = Geometry();
  g.head_dim_v = 64;
  st = Load(g);
  EXPECT_NE(st.message().find("head_dim_v 32"), std::string::npos) << st.message();
}

TEST_F(CorruptStoreTest, KiviStagingTensorChecked) {
  Reset({kv::KvFormat::kKivi4, kv::KvFormat::kQ4_0});
  ASSERT_TRUE(Load().ok());
  // Loading kivi4 rows into a q4_0 pool is a format mismatch, not a crash.
  Status st = Load(Geometry(), kv::KvFormats{kv::KvFormat::kQ4_0, kv::KvFormat::kQ4_0});
  EXPECT_EQ(st.code(), ErrorCode::kFailedPrecondition);
  // A block whose staging tensor has the wrong shape: a hostile but consistent rewrite.
  std::string f = Read(BlockName(0));
  const size_t at = f.find("[1,32,32]");
  ASSERT_NE(at, std::string::npos);
  f.replace(at, 9, "[1,32,16]");  // same length; the offsets no longer add up
  ReplaceBlockConsistently(0, f);
  ExpectLoadError(ErrorCode::kCorrupt, "layer.0.k_staging");
}

struct ManifestCase {
  const char* what;
  std::function<void(Json&)> edit;
  ErrorCode code;
  std::string needle;
};

TEST_F(CorruptStoreTest, ManifestTampering) {
  const std::vector<ManifestCase> cases = {
      {"n_rows as string", [](Json& j) { j["blocks"][0]["n_rows"] = "8"; }, ErrorCode::kCorrupt,
       "field 'blocks[0].n_rows' is string, expected an integer"},
      {"id past vocab", [](Json& j) { j["token_ids"][3] = 5000; }, ErrorCode::kOutOfRange,
       "token_ids[3] = 5000 is outside the vocabulary (n_vocab 1000)"},
      {"negative id", [](Json& j) { j["token_ids"][3] = -1; }, ErrorCode::kOutOfRange,
       "token_ids[3] = -1"},
      {"float id", [](Json& j) { j["token_ids"][3] = 1.5; }, ErrorCode::kCorrupt,
       "field 'token_ids[3]' is a float, expected an integer"},
      {"huge id", [](Json& j) { j["token_ids"][3] = uint64_t{1} << 40; }, ErrorCode::kCorrupt,
       "token_ids[3]' = 1099511627776 is outside"},
      {"missing block", [](Json& j) { j["blocks"].erase(1); }, ErrorCode::kCorrupt,
       "blocks hold 8 rows but token_ids has 12 tokens"},
      {"n_tokens", [](Json& j) { j["n_tokens"] = 11; }, ErrorCode::kCorrupt,
       "'token_ids' has 12 entries but n_tokens is 11"},
      {"version", [](Json& j) { j["format_version"] = 2; }, ErrorCode::kUnsupported,
       "format_version 2"},
      {"format", [](Json& j) { j["format"] = "other"; }, ErrorCode::kCorrupt,
       "field 'format' is 'other'"},
      {"other agent", [](Json& j) { j["agent_id"] = "thief"; }, ErrorCode::kCorrupt,
       "manifest belongs to agent 'acme/thief'"},
      {"bad agent id", [](Json& j) { j["agent_id"] = "a\x01"; }, ErrorCode::kCorrupt,
       "agent id 'a\\x01' contains a control character"},
      {"fingerprint", [](Json& j) { j["model_fingerprint"] = std::string(32, 'a'); },
       ErrorCode::kFailedPrecondition, "computed by model aaaa"},
      {"fingerprint type", [](Json& j) { j["model_fingerprint"] = 7; }, ErrorCode::kCorrupt,
       "field 'model_fingerprint' is an integer, expected a string"},
      {"kv format", [](Json& j) { j["kv_format"]["k"] = "q5_9"; }, ErrorCode::kCorrupt,
       "field 'kv_format.k'"},
      {"layers", [](Json& j) { j["geometry"]["n_layers"] = 0; }, ErrorCode::kCorrupt,
       "field 'geometry.n_layers' = 0 is outside [1, 1024]"},
      {"no geometry", [](Json& j) { j.erase("geometry"); }, ErrorCode::kCorrupt,
       "field 'geometry' is missing"},
      {"path in file", [](Json& j) { j["blocks"][0]["file"] = "../../etc/passwd"; },
       ErrorCode::kCorrupt, "does not match its checksum"},
      {"checksum", [](Json& j) { j["blocks"][0]["xxh3_128"] = "zz"; }, ErrorCode::kCorrupt,
       "'zz' is not 32 hex digits"},
      {"partial release", [](Json& j) { j["blocks"][1]["released_layers"] = {0}; },
       ErrorCode::kCorrupt, "only whole blocks can be released"},
      {"release order",
       [](Json& j) {
         j["blocks"][0]["released_layers"] = {1, 0};
       },
       ErrorCode::kCorrupt, "not in ascending order"},
      {"first_pos", [](Json& j) { j["blocks"][1]["first_pos"] = 3; }, ErrorCode::kCorrupt,
       "positions start at 8, the manifest says first_pos 3"},
      {"bytes", [](Json& j) { j["blocks"][0]["bytes"] = 1 << 30; }, ErrorCode::kCorrupt,
       "the manifest says 1073741824"},
      {"text type", [](Json& j) { j["text"] = 5; }, ErrorCode::kCorrupt,
       "field 'text' is an integer, expected a string"},
      {"text hex", [](Json& j) { j["text_hex"] = "4g"; }, ErrorCode::kCorrupt,
       "'text_hex' is not lowercase hex"},
      {"not an object", [](Json& j) { j = Json::array(); }, ErrorCode::kCorrupt,
       "document is not a JSON object"},
      {"memory mode", [](Json& j) { j["memory"] = {{"mode", "episodic"}}; }, ErrorCode::kCorrupt,
       "field 'memory.mode' is 'episodic', expected 'full' or 'retrieval'"},
      {"memory type", [](Json& j) { j["memory"] = 3; }, ErrorCode::kCorrupt, "'memory'"},
      {"memory policy name",
       [](Json& j) { j["memory"] = {{"policy", "../etc"}, {"config", Json::object()}}; },
       ErrorCode::kCorrupt, "field 'memory.policy' is '../etc'"},
      {"memory policy type", [](Json& j) { j["memory"] = {{"policy", 7}}; }, ErrorCode::kCorrupt,
       "'memory.policy'"},
      {"memory config type",
       [](Json& j) { j["memory"] = {{"policy", "full"}, {"config", {1, 2}}}; },
       ErrorCode::kCorrupt, "'memory.config'"},
      {"memory state type",
       [](Json& j) { j["memory"] = {{"policy", "h2o"}, {"config", Json::object()}, {"state", "x"}}; },
       ErrorCode::kCorrupt, "'memory.state'"},
      {"swapped blocks",
       [](Json& j) {
         for (const char* k : {"file", "xxh3_128", "bytes"})
           std::swap(j["blocks"][0][k], j["blocks"][1][k]);
       },
       ErrorCode::kCorrupt, "block metadata 'n_rows' is '4', expected '8'"},
  };
  for (const ManifestCase& c : cases) {
    SCOPED_TRACE(c.what);
    EditManifest(c.edit);
    ExpectLoadError(c.code, c.needle);
  }
  Write("manifest.json", "{\"format\": ");
  ExpectLoadError(ErrorCode::kCorrupt, "not valid JSON");
  Write("manifest.json", std::string(100, '[') + std::string(100, ']'));
  ExpectLoadError(ErrorCode::kCorrupt, "nests deeper");
  RestoreManifest();
  EXPECT_TRUE(Load().ok());
  // A manifest written before the policy seam reads as its mode, settings as config, legacy
  // (the policy table upgrades it: memory/policy_table_test.cpp).
  EditManifest([](Json& j) {
    j["memory"] = {{"mode", "retrieval"},  {"block_size", 16}, {"top_k", 4},
                   {"strategy", "rr-max"}, {"keep_first", 0},  {"keep_last", 0}};
  });
  Result<MemoryRecord> old = store_->ReadMemory(kKey);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->legacy);
  EXPECT_EQ(old->policy, "retrieval");
  EXPECT_EQ(old->config, (Json{{"block_size", 16}, {"top_k", 4}, {"strategy", "rr-max"},
                               {"keep_first", 0}, {"keep_last", 0}}));
  EXPECT_TRUE(Load().ok());
  RestoreManifest();
}

TEST_F(CorruptStoreTest, MissingBlockFileAndSymlinks) {
  const std::string name = BlockName(1);
  const std::string block = Read(name);
  std::filesystem::remove(agent_dir_ + "/" + name);
  ExpectLoadError(ErrorCode::kCorrupt, "block file missing");
  // A symlink in place of the block is refused, even to a file with the right bytes.
  Write("elsewhere", block);
  std::filesystem::create_symlink(agent_dir_ + "/elsewhere", agent_dir_ + "/" + name);
  ExpectLoadError(ErrorCode::kInvalidArgument, "symlink");
  std::filesystem::remove(agent_dir_ + "/manifest.json");
  Write("real-manifest", manifest_text_);
  std::filesystem::create_symlink(agent_dir_ + "/real-manifest", agent_dir_ + "/manifest.json");
  ExpectLoadError(ErrorCode::kInvalidArgument, "symlink");
}

TEST_F(CorruptStoreTest, BadAgentIds) {
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence seq(&pool);
  AgentRecord rec;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {std::string(300, 'x'), "300 bytes long"},
      {"a\x01"
       "b",
       "control character at byte 1"},
      {"caf\xe9", "not valid UTF-8"},
      {"", "is empty"},
  };
  for (const auto& [id, needle] : bad) {
    for (const Status& st :
         {store_->Load({"t", id}, &seq, &rec), store_->Save({"t", id}, seq, {}, "").status(),
          store_->Delete({"t", id})}) {
      EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    }
    EXPECT_FALSE(store_->Contains({"t", id}));
  }
  // Nothing was created outside the model directory.
  EXPECT_EQ(testing::ListNames(dir_->path()).size(), 1u);
}

TEST_F(CorruptStoreTest, SaveRejectsInconsistentInput) {
  kv::KvPool pool(Geometry(), 4);
  kv::KvSequence seq(&pool);
  std::mt19937 rng(2);
  testing::AppendRandomRows(&seq, 5, 0, &rng);
  Result<SaveStats> s = store_->Save(kKey, seq, std::vector<int32_t>(4, 1), "x");
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("4 token ids for a sequence of 5 rows"), std::string::npos);
  s = store_->Save(kKey, seq, std::vector<int32_t>{1, 2, 3, 4, kVocab}, "x");
  EXPECT_EQ(s.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(s.status().message().find("token_ids[4] = 1000"), std::string::npos);
  const std::vector<size_t> ends = {1, 2, 3, 2, 5};
  s = store_->Save(kKey, seq, std::vector<int32_t>(5, 1), "xxxxx", ends);
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);

  // A row written in layer 0 only (a pass interrupted between layers).
  auto rows = seq.AppendRows(1, 5);
  ASSERT_TRUE(rows.ok());
  std::vector<float> k(32, 1.0f), v(32, 1.0f);
  pool.WriteToken((*rows)[0], 0, k.data(), v.data());
  pool.set_rotated_pos((*rows)[0], 5);
  s = store_->Save(kKey, seq, std::vector<int32_t>(6, 1), "x");
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("layer 1 has 5 rows written"), std::string::npos)
      << s.status().message();
  // The failed saves left the previous turn intact.
  EXPECT_TRUE(Load().ok());

  // Load needs an empty sequence.
  AgentRecord rec;
  Status st = store_->Load(kKey, &seq, &rec);
  EXPECT_EQ(st.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("already holds 6 rows"), std::string::npos);
  EXPECT_EQ(seq.n_rows(), 6);
}

}  // namespace
}  // namespace kvmem::memory::store
