// The store's backends against one contract (store_backend.h), and the Redis backend as several
// servers share it: two AgentStores on one redis-server (started here) see each other's agents
// byte for byte, a lease keeps one writer, a fence refuses a writer whose lease passed on, a
// lease of a server that died expires, tenants never share keys, and a Redis that is down or
// gone gives errors within the timeout, never a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent_store_test_util.h"
#include "memory/store/agent_store.h"
#include "memory/store/local_backend.h"
#include "memory/store/redis_backend.h"
#include "redis_server.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using namespace std::chrono_literals;
using testing::AppendRandomRows;
using testing::ExpectSameRows;
using testing::Geometry;
using testing::kFingerprint;
using testing::kVocab;
using testing::RedisServer;
using testing::TempDir;
using testing::Tokens;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Status PutString(StoreBackend& b, const Space& space, std::string_view name, std::string_view s,
                 std::string_view fence = {}) {
  const std::span<const uint8_t> pieces[] = {Bytes(s.substr(0, s.size() / 2)),
                                             Bytes(s.substr(s.size() / 2))};
  return b.Put(space, name, pieces, fence);
}

std::string GetString(const StoreBackend& b, const Space& space, std::string_view name) {
  Result<std::unique_ptr<Blob>> blob = b.Open(space, name);
  EXPECT_TRUE(blob.ok()) << blob.status().ToString();
  if (!blob.ok()) return "";
  std::string s((*blob)->size(), '\0');
  EXPECT_TRUE((*blob)->ReadAt(0, {reinterpret_cast<uint8_t*>(s.data()), s.size()}).ok());
  return s;
}

RedisOptions Options(const RedisServer& redis) {
  RedisOptions o = *ParseRedisUrl(redis.url());
  o.timeout = 1000ms;
  return o;
}

// The contract, run on each backend.
void CheckContract(StoreBackend& b) {
  const Space a{"acme", std::string(32, 'a')}, other{"beta", std::string(32, 'a')};
  EXPECT_EQ(b.List(a).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(b.Open(a, "manifest.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(b.Size(a, "x").status().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(PutString(b, a, "kv-one", "first bytes").ok());
  ASSERT_TRUE(PutString(b, a, "empty", "").ok());
  EXPECT_EQ(GetString(b, a, "kv-one"), "first bytes");
  EXPECT_EQ(*b.Size(a, "kv-one"), 11u);
  EXPECT_EQ(*b.Size(a, "empty"), 0u);
  ASSERT_TRUE(PutString(b, a, "kv-one", "replaced").ok());
  EXPECT_EQ(GetString(b, a, "kv-one"), "replaced");
  Result<std::unique_ptr<Blob>> blob = b.Open(a, "kv-one");
  ASSERT_TRUE(blob.ok());
  uint8_t past[4];
  EXPECT_EQ((*blob)->ReadAt(6, past).code(), ErrorCode::kCorrupt);  // ends first

  const int64_t v0 = *b.Version(a);
  Result<int64_t> v1 = b.Publish(a, "manifest.json", Bytes("{}"), {});
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  if (b.shared()) {
    EXPECT_GT(*v1, v0);
  }
  EXPECT_EQ(*b.Version(a), *v1);
  std::vector<std::string> names = *b.List(a);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"empty", "kv-one", "manifest.json"}));
  const std::vector<Space> spaces = *b.Spaces();
  ASSERT_EQ(spaces.size(), 1u);
  EXPECT_EQ(spaces[0].name, a.name);
  if (b.shared()) {
    // Another tenant's space of the same name is another space.
    EXPECT_EQ(b.Open(other, "kv-one").status().code(), ErrorCode::kNotFound);
  }

  EXPECT_TRUE(*b.PutIfAbsent({}, "name-secret", Bytes("s1")));
  EXPECT_FALSE(*b.PutIfAbsent({}, "name-secret", Bytes("s2")));
  EXPECT_EQ(GetString(b, {}, "name-secret"), "s1");

  EXPECT_TRUE(b.Remove(a, "empty", {}).ok());
  EXPECT_EQ(b.Remove(a, "empty", {}).code(), ErrorCode::kNotFound);
  ASSERT_TRUE(b.RemoveSpace(a, {}).ok());
  EXPECT_EQ(b.List(a).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(b.Spaces()->empty());
  if (b.shared()) {
    EXPECT_GT(*b.Version(a), *v1);  // a server holding it sees it changed
  }
}

TEST(StoreBackendTest, LocalKeepsTheContract) {
  TempDir dir;
  Result<std::unique_ptr<LocalBackend>> b = LocalBackend::Open(dir / "model", &RealFileOps());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  CheckContract(**b);
}

TEST(StoreBackendTest, RedisKeepsTheContract) {
  RedisServer redis;
  Result<std::unique_ptr<RedisBackend>> b = RedisBackend::Open(Options(redis), kFingerprint);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  CheckContract(**b);
}

TEST(StoreBackendTest, RedisUrls) {
  Result<RedisOptions> o = ParseRedisUrl("redis://cache.internal:6380/3");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->host, "cache.internal");
  EXPECT_EQ(o->port, 6380);
  EXPECT_EQ(o->db, 3);
  o = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->port, 6379);
  EXPECT_EQ(o->db, 0);
  for (const char* bad : {"redis://", "redis://h:0", "redis://h:99999", "redis://h:1/16",
                          "redis://h:1/x", "redis://user@h:1", "http://h:1", "redis://h:1x"}) {
    EXPECT_EQ(ParseRedisUrl(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(StoreBackendTest, ALeaseKeepsOneWriterAndItsFenceRefusesALateOne) {
  RedisServer redis;
  auto one = RedisBackend::Open(Options(redis), kFingerprint);
  auto two = RedisBackend::Open(Options(redis), kFingerprint);
  ASSERT_TRUE(one.ok() && two.ok());
  const Space a{"acme", std::string(32, 'b')};
  Result<std::string> t1 = (*one)->AcquireLease(a, 0ms);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  // The second server waits, then is told the agent is busy.
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> busy = (*two)->AcquireLease(a, 200ms);
  EXPECT_EQ(busy.status().code(), ErrorCode::kUnavailable);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  ASSERT_TRUE(PutString(**one, a, "kv-x", "one's", *t1).ok());
  ASSERT_TRUE((*one)->Publish(a, "manifest.json", Bytes("one"), *t1).ok());

  // The lease passes on (as when the first server stalled past it): the first server's fence
  // no longer opens anything.
  (*one)->ReleaseLease(a, *t1);
  Result<std::string> t2 = (*two)->AcquireLease(a, 0ms);
  ASSERT_TRUE(t2.ok());
  EXPECT_NE(*t1, *t2);
  EXPECT_EQ((*one)->Publish(a, "manifest.json", Bytes("late"), *t1).status().code(),
            ErrorCode::kFailedPrecondition);
  EXPECT_EQ(PutString(**one, a, "kv-y", "late", *t1).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*one)->Remove(a, "kv-x", *t1).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*one)->RemoveSpace(a, *t1).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(GetString(**two, a, "manifest.json"), "one");
  EXPECT_EQ(GetString(**two, a, "kv-x"), "one's");
  EXPECT_EQ((*two)->Size(a, "kv-y").status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE((*two)->Publish(a, "manifest.json", Bytes("two"), *t2).ok());
  (*two)->ReleaseLease(a, *t2);
}

TEST(StoreBackendTest, ALeaseOfAServerThatDiedExpiresAndOneThatLivesIsRenewed) {
  RedisServer redis;
  RedisOptions o = Options(redis);
  o.lease_ttl = 600ms;
  const Space a{"acme", std::string(32, 'c')};
  auto alive = RedisBackend::Open(o, kFingerprint);
  ASSERT_TRUE(alive.ok());
  Result<std::string> t = (*alive)->AcquireLease(a, 0ms);
  ASSERT_TRUE(t.ok());
  auto other = RedisBackend::Open(o, kFingerprint);
  ASSERT_TRUE(other.ok());
  // Renewed every ttl / 3: still held well past the ttl.
  EXPECT_EQ((*other)->AcquireLease(a, 1500ms).status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE((*alive)->Publish(a, "manifest.json", Bytes("still mine"), *t).ok());
  // The holder goes without releasing (its renewer stops, as in a kill -9): the lease expires.
  alive->reset();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> next = (*other)->AcquireLease(a, 3000ms);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  EXPECT_EQ(GetString(**other, a, "manifest.json"), "still mine");
}

TEST(StoreBackendTest, BlocksAreReadFromRedisOncePerServer) {
  RedisServer redis;
  auto b = RedisBackend::Open(Options(redis), kFingerprint);
  ASSERT_TRUE(b.ok());
  const Space a{"acme", std::string(32, 'd')};
  ASSERT_TRUE(PutString(**b, a, "kv-block", "immutable").ok());
  ASSERT_TRUE(PutString(**b, a, "manifest.json", "mutable").ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(GetString(**b, a, "kv-block"), "immutable");
    EXPECT_EQ(GetString(**b, a, "manifest.json"), "mutable");
  }
  EXPECT_EQ((*b)->cache_misses(), 1);
  EXPECT_EQ((*b)->cache_hits(), 2);
  // A removed block is gone from the cache too.
  ASSERT_TRUE((*b)->Remove(a, "kv-block", {}).ok());
  EXPECT_EQ((*b)->Open(a, "kv-block").status().code(), ErrorCode::kNotFound);
}

// The cache's local directory: a restarted server (a new backend on the same directory) reads a
// block from there, also while Redis is down; a damaged copy is read from Redis again.
TEST(StoreBackendTest, BlocksAreReadFromTheCacheDirectoryAfterARestart) {
  RedisServer redis;
  TempDir dir;
  RedisOptions o = Options(redis);
  o.cache_dir = dir / "cache";
  const Space a{"acme", std::string(32, 'e')};
  {
    auto first = RedisBackend::Open(o, kFingerprint);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE(PutString(**first, a, "kv-block", "immutable").ok());
    EXPECT_EQ(GetString(**first, a, "kv-block"), "immutable");
    EXPECT_EQ((*first)->cache_misses(), 1);
  }
  auto second = RedisBackend::Open(o, kFingerprint);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(GetString(**second, a, "kv-block"), "immutable");
  EXPECT_EQ(GetString(**second, a, "kv-block"), "immutable");
  EXPECT_EQ((*second)->disk_hits(), 1);
  EXPECT_EQ((*second)->cache_hits(), 1);
  EXPECT_EQ((*second)->cache_misses(), 0);

  // A damaged copy: read from Redis, and the copy replaced.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.cache_dir)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('!');
    ++files;
  }
  ASSERT_EQ(files, 1u);
  auto third = RedisBackend::Open(o, kFingerprint);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(GetString(**third, a, "kv-block"), "immutable");
  EXPECT_EQ((*third)->cache_misses(), 1);
  EXPECT_EQ((*third)->disk_hits(), 0);

  // Redis down: the block still comes from the directory; the manifest cannot.
  auto fourth = RedisBackend::Open(o, kFingerprint);
  ASSERT_TRUE(fourth.ok());
  redis.Kill();
  EXPECT_EQ(GetString(**fourth, a, "kv-block"), "immutable");
  EXPECT_EQ((*fourth)->disk_hits(), 1);
  EXPECT_EQ((*fourth)->Open(a, "manifest.json").status().code(), ErrorCode::kIo);
}

// Two servers' stores on one Redis: an agent saved by one loads on the other byte for byte,
// versions move with every save and delete, and each tenant's agents are its own.
TEST(RedisAgentStoreTest, TwoServersShareAgents) {
  RedisServer redis;
  auto open = [&] {
    Result<AgentStore> s = AgentStore::Open({redis.url(), kFingerprint, kVocab});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  };
  AgentStore one = open(), two = open();
  EXPECT_TRUE(one.shared());
  std::mt19937 rng(7);
  const kv::KvFormats formats{kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0};
  kv::KvPool src_pool(Geometry(), 8, formats);
  kv::KvSequence src(&src_pool);
  AppendRandomRows(&src, 100, 3, &rng);
  const AgentKey key{"acme", "planner"}, twin{"beta", "planner"};
  Result<SaveStats> saved = one.Save(key, src, Tokens(100), "the prompt");
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->blocks_written, 3);
  EXPECT_EQ(*two.Version(key), saved->version);
  EXPECT_TRUE(two.Contains(key));
  EXPECT_FALSE(two.Contains(twin));  // same id, another tenant

  kv::KvPool dst_pool(Geometry(), 8, formats);
  kv::KvSequence dst(&dst_pool);
  AgentRecord rec;
  ASSERT_TRUE(two.Load(key, &dst, &rec).ok());
  EXPECT_EQ(rec.tokens, Tokens(100));
  EXPECT_EQ(rec.version, saved->version);
  ExpectSameRows(src, dst);

  // The second server continues the agent under its lease; only the new block is written.
  {
    Result<AgentLease> lease = two.Lease(key);
    ASSERT_TRUE(lease.ok());
    AppendRandomRows(&dst, 20, 103, &rng);
    std::vector<int32_t> tokens = Tokens(120);
    Result<SaveStats> again = two.Save(key, dst, tokens, "the prompt, longer");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->blocks_reused, 2);
    EXPECT_EQ(again->blocks_written, 1);
    EXPECT_EQ(again->files_removed, 1);  // the first turn's partial block
    EXPECT_GT(again->version, saved->version);
    // Meanwhile the first server's save waits for the lease, then gives up.
    StoreOptions quick{redis.url(), kFingerprint, kVocab};
    quick.lease_wait = 100ms;
    Result<AgentStore> impatient = AgentStore::Open(quick);
    ASSERT_TRUE(impatient.ok());
    EXPECT_EQ(impatient->Save(key, src, Tokens(100), "stale").status().code(),
              ErrorCode::kUnavailable);
  }
  kv::KvPool back_pool(Geometry(), 8, formats);
  kv::KvSequence back(&back_pool);
  ASSERT_TRUE(one.Load(key, &back, &rec).ok());
  EXPECT_EQ(rec.text, "the prompt, longer");
  ExpectSameRows(dst, back);

  ASSERT_TRUE(one.Save(twin, src, Tokens(100), "twin").ok());
  Result<std::vector<AgentInfo>> listed = two.List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, key);
  EXPECT_EQ((*listed)[1].key, twin);
  EXPECT_GT((*listed)[0].bytes_on_disk, 0u);

  const int64_t before = *one.Version(key);
  ASSERT_TRUE(two.Delete(key).ok());
  EXPECT_FALSE(one.Contains(key));
  EXPECT_GT(*one.Version(key), before);
  EXPECT_TRUE(one.Contains(twin));
  ASSERT_TRUE(one.SaveResponse(key, R"({"id":"r"})").ok());
  EXPECT_EQ(*two.LoadResponse(key), R"({"id":"r"})");
  EXPECT_EQ(two.LoadResponse(twin).status().code(), ErrorCode::kNotFound);
}

// Redis down: Open says so at once; calls on a store whose Redis went away fail within the
// timeout; when it is back (its append-only file replayed) every acknowledged save is there, and
// the first call gets through although every pooled connection died with the old server.
TEST(RedisAgentStoreTest, ARedisThatIsDownGivesErrorsNotHangs) {
  StoreOptions nowhere{"redis://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort()) + "/0",
                       kFingerprint, kVocab};
  EXPECT_EQ(AgentStore::Open(nowhere).status().code(), ErrorCode::kUnavailable);

  RedisServer redis;
  StoreOptions o{redis.url(), kFingerprint, kVocab};
  o.redis_timeout = 500ms;
  Result<AgentStore> store = AgentStore::Open(o);
  ASSERT_TRUE(store.ok());
  std::mt19937 rng(3);
  kv::KvPool pool(Geometry(), 8, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvSequence seq(&pool);
  AppendRandomRows(&seq, 60, 0, &rng);
  const AgentKey key{"acme", "durable"};
  ASSERT_TRUE(store->Save(key, seq, Tokens(60), "acknowledged").ok());
  // Calls at once leave several connections pooled, all of which the restart below closes.
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      for (int j = 0; j < 20; ++j) EXPECT_TRUE(store->Version(key).ok());
    });
  }
  for (std::thread& t : callers) t.join();

  // Killed and back at once (its append-only file replayed): the save is there, and the first
  // call gets through although every pooled connection died.
  redis.Kill();
  redis.Start();
  const auto load_back = [&] {
    kv::KvPool dst_pool(Geometry(), 8, {kv::KvFormat::kF16, kv::KvFormat::kF16});
    kv::KvSequence dst(&dst_pool);
    AgentRecord rec;
    Status loaded = store->Load(key, &dst, &rec);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    EXPECT_EQ(rec.text, "acknowledged");
    ExpectSameRows(seq, dst);
  };
  load_back();

  // Down: every call fails within the timeout.
  redis.Kill();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(store->Save(key, seq, Tokens(60), "lost").status().code(), ErrorCode::kIo);
  EXPECT_EQ(store->Version(key).status().code(), ErrorCode::kIo);
  EXPECT_EQ(store->Lease(key).status().code(), ErrorCode::kIo);
  EXPECT_FALSE(store->Contains(key));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  redis.Start();
  load_back();
}

}  // namespace
}  // namespace kvmem::memory::store
