// The keep policy (memory/segments/keep_policy.h) on a tiny random llama with the byte tokenizer
// and the tiny random BERT: segments put, replaced and deleted through the runtime (and
// persisted); an answer reads the segments (their text changes its logits); a memory saved to
// the store and restored answers with the logits it gave before; a put that fails (its cache, or
// the save) leaves the old segment whole, in RAM and in the store; an agent of another policy, a
// bad name and a missing encoder are refused.
#include "memory/segments/keep_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "agent_runtime_fixture.h"
#include "faulty_fs.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {
namespace {

using Op = SegmentRequest::Op;

SegmentRequest Put(const std::string& name, const std::string& text) {
  return {Op::kPut, name, text};
}
SegmentRequest Delete(const std::string& name) { return {Op::kDelete, name, ""}; }
SegmentRequest List() { return {Op::kList, "", ""}; }

const char kDoor[] = "The red door of the kitchen is locked.";
const char kKey[] = "The brass key lies under the blue mat.";
const char kQuestion[] = "Q: How does one open the red door? A:";

class KeepPolicyTest : public testing::AgentRuntimeFixture {
 protected:
  void SetUp() override {
    AgentRuntimeFixture::SetUp();
    env_.model = model_.get();
    env_.tok = &tok_;
    env_.threads = &threads_;
    batcher_ =
        std::make_unique<engine::StepBatcher>(*model_, &threads_, engine::StepBatcher::Options{});
    env_.compute = batcher_.get();
    env_.n_ctx = 512;
    env_.max_batch = 16;
    env_.encoder = &*encoder_;
  }

  struct Agent {
    std::unique_ptr<kv::KvPool> pool;
    std::unique_ptr<MemoryPolicy> policy;
  };
  // blocks 0: as many as the row needs.
  Agent Make(const Json& config, int blocks = 0) {
    auto spec = ParseMemorySpec(env_, "keep", config);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    Agent a;
    if (blocks == 0) blocks = static_cast<int>(spec->kind->rows_needed(env_, spec->config) / 8 + 4);
    a.pool = std::make_unique<kv::KvPool>(model_->kv_geometry(8), blocks, Formats());
    auto p = spec->kind->create(env_, spec->config, a.pool.get());
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) a.policy = std::move(*p);
    return a;
  }
  static kv::KvFormats Formats() { return {kv::KvFormat::kF16, kv::KvFormat::kF16}; }

  // A turn's logits after its prompt; the turn is committed (the step ends) or aborted.
  std::vector<float> Ask(MemoryPolicy* p, const std::string& prompt, bool commit = true) {
    auto plan = p->Plan({prompt, ""});
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return {};
    std::vector<float> logits;
    auto applied = p->Apply(*plan, &logits);
    EXPECT_TRUE(applied.ok()) << applied.status().ToString();
    if (commit) {
      EXPECT_TRUE(p->Commit().ok());
    } else {
      p->Abort();
    }
    return logits;
  }

  static float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      d = std::max(d, std::abs(a[i] - b[i]));
    return d;
  }

  static std::vector<std::string> Names(const Json& list) {
    std::vector<std::string> names;
    for (const Json& s : list) names.push_back(s["name"].get<std::string>());
    return names;
  }

  PolicyEnv env_;
  std::unique_ptr<engine::StepBatcher> batcher_;
};

TEST_F(KeepPolicyTest, SegmentsArePutReplacedAndDeletedThroughTheRuntimeAndPersisted) {
  auto rt = Runtime();
  auto spec = rt->ValidateMemory("keep", Json::object());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_TRUE(rt->CreateAgent(ada_, *spec).ok());
  auto put = rt->Segments(ada_, Put("door", kDoor));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ((*put)["name"], "door");
  EXPECT_EQ((*put)["text"], kDoor);
  EXPECT_EQ((*put)["tokens"], static_cast<int64_t>(std::string(kDoor).size()) + 1);  // bytes + "\n"
  ASSERT_TRUE(rt->Segments(ada_, Put("key", kKey)).ok());
  ASSERT_TRUE(rt->Segments(ada_, Put("door", "The red door is open.")).ok());  // replaced in place
  auto list = rt->Segments(ada_, List());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(Names(*list), (std::vector<std::string>{"door", "key"}));
  EXPECT_EQ((*list)[0]["text"], "The red door is open.");
  EXPECT_EQ(rt->Get(ada_)->tokens, rt->Inspect(ada_)->rows);

  std::string reply;
  Turn(*rt, &ada_, kQuestion, &reply);
  EXPECT_EQ(rt->Get(ada_)->last_turn["segments_read"], Json({"door", "key"}));

  auto deleted = rt->Segments(ada_, Delete("key"));
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(*deleted, Json({{"deleted", true}, {"name", "key"}}));
  EXPECT_EQ(rt->Segments(ada_, Delete("key")).status().code(), ErrorCode::kNotFound);

  // Every write was saved: a runtime started on the store holds the same segments.
  auto restarted = Runtime();
  auto again = restarted->Segments(ada_, List());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Names(*again), (std::vector<std::string>{"door"}));
  EXPECT_EQ((*again)[0]["text"], "The red door is open.");
  auto view = restarted->Inspect(ada_);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->policy, "keep");
  EXPECT_NE(view->text.find("The red door is open.\n"), std::string::npos);
  ASSERT_EQ(view->memory["parts"].size(), 1u);
  EXPECT_EQ(view->memory["parts"][0]["kind"], "segment");
  const Json& bytes = view->memory["parts"][0]["bytes"];
  EXPECT_EQ(
      view->text.substr(bytes[0].get<size_t>(), bytes[1].get<size_t>() - bytes[0].get<size_t>()),
      "The red door is open.\n");
}

TEST_F(KeepPolicyTest, RefusesOtherPoliciesBadNamesAndBadTexts) {
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, *rt->ValidateMemory("full", Json::object())).ok());
  auto other = rt->Segments(ada_, List());
  EXPECT_EQ(other.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(other.status().message().find("segments need the keep policy"), std::string::npos)
      << other.status().message();
  const store::AgentKey bob{"t", "bob"};
  EXPECT_EQ(rt->Segments(bob, List()).status().code(), ErrorCode::kNotFound);
  ASSERT_TRUE(rt->CreateAgent(bob, *rt->ValidateMemory("keep", Json::object())).ok());
  for (const std::string& name :
       {std::string(), std::string("a/b"), std::string("tab\there"), std::string(129, 'x'),
        std::string("\xff"), std::string("c1\xc2\x85")}) {
    EXPECT_EQ(rt->Segments(bob, Put(name, "x")).status().code(), ErrorCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(rt->Segments(bob, Put(std::string(128, 'x'), "ok")).ok());
  EXPECT_TRUE(rt->Segments(bob, Put("caf\xc3\xa9 \xe2\x9c\x93", "ok")).ok());
  EXPECT_EQ(
      rt->Segments(bob, Put("big", std::string(kMaxSegmentTextBytes + 1, 'x'))).status().code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(rt->Segments(bob, Put("bad", "\xc3")).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(KeepPolicyTest, AnAnswerReadsTheSegments) {
  Agent a = Make(Json::object());
  Agent b = Make(Json::object());
  ASSERT_TRUE(a.policy && b.policy);
  ASSERT_TRUE(a.policy->Segments(Put("door", kDoor)).ok());
  ASSERT_TRUE(a.policy->Segments(Put("key", kKey)).ok());
  ASSERT_TRUE(b.policy->Segments(Put("door", kDoor)).ok());
  ASSERT_TRUE(b.policy->Segments(Put("key", "The brass key lies in the green box.")).ok());
  const std::vector<float> la = Ask(a.policy.get(), kQuestion);
  const std::vector<float> lb = Ask(b.policy.get(), kQuestion);
  EXPECT_GT(MaxAbsDiff(la, lb), 1e-3f);  // another text in a segment, another answer
  const Json report = a.policy->Report();
  EXPECT_EQ(report["segments_read"], Json({"door", "key"}));
  EXPECT_EQ(report["segments"], 2);
  EXPECT_EQ(report["segment_tokens"],
            static_cast<int64_t>(std::string(kDoor).size() + std::string(kKey).size() + 2));
  EXPECT_GT(report["recomputed_share"].get<double>(), 0.0);
  EXPECT_LE(report["recomputed_share"].get<double>(), 1.0);
  EXPECT_EQ(report["rule"], "multi_hop");
  EXPECT_EQ(report["encoded_caches"], 2);  // each segment's cache, computed by its put
  // A segment deleted is no longer read.
  ASSERT_TRUE(a.policy->Segments(Delete("key")).ok());
  Ask(a.policy.get(), kQuestion);
  EXPECT_EQ(a.policy->Report()["segments_read"], Json({"door"}));
}

// The memory saved to the store and restored in a new pool answers with the logits it gave
// before the restart: once with every segment a cache of its own, once with a static group
// (static_after 1: the group is cached jointly after a quiet turn).
TEST_F(KeepPolicyTest, RestartGivesTheLogitsOfBefore) {
  for (const Json& config : {Json::object(), Json{{"static_after", 1}, {"group_size", 4}},
                             Json{{"group_size", 1}, {"recompute", "kv_deviation"}}}) {
    SCOPED_TRACE(config.dump());
    Agent a = Make(config);
    ASSERT_TRUE(a.policy);
    ASSERT_TRUE(a.policy->Segments(Put("door", kDoor)).ok());
    ASSERT_TRUE(a.policy->Segments(Put("key", kKey)).ok());
    Ask(a.policy.get(), "Q: Where is the key? A:");
    Ask(a.policy.get(), "Q: Is the door locked? A:");
    const std::vector<float> before = Ask(a.policy.get(), kQuestion, /*commit=*/false);
    const Json report_before = a.policy->Report();

    auto spec = ParseMemorySpec(env_, "keep", config);
    ASSERT_TRUE(spec.ok());
    const PersistedMemory m = a.policy->Persist();
    ASSERT_NE(m.rows, nullptr);
    auto saved =
        store_->Save(ada_, *m.rows, m.tokens, m.text, m.token_ends, RecordOf(*spec, m.state));
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    kv::KvPool pool(model_->kv_geometry(8),
                    static_cast<int>(spec->kind->rows_needed(env_, spec->config) / 8 + 4),
                    Formats());
    StoredMemory stored;
    stored.rows = std::make_unique<kv::KvSequence>(&pool);
    store::AgentRecord rec;
    ASSERT_TRUE(store_->Load(ada_, stored.rows.get(), &rec).ok());
    stored.tokens = std::move(rec.tokens);
    stored.text = std::move(rec.text);
    stored.state = std::move(rec.memory.state);
    auto restored = spec->kind->restore(env_, spec->config, &pool, std::move(stored));
    ASSERT_TRUE(restored.ok()) << restored.status().ToString();
    const std::vector<float> after = Ask(restored->get(), kQuestion, /*commit=*/false);
    EXPECT_LT(MaxAbsDiff(before, after), 1e-3f);
    EXPECT_EQ((*restored)->Report()["segments_read"], report_before["segments_read"]);
    EXPECT_EQ((*restored)->Report()["step"], report_before["step"]);
    EXPECT_EQ(Names(*(*restored)->Segments(List())), (std::vector<std::string>{"door", "key"}));
  }
}

// A put whose cache cannot be computed (the pool is full) fails and leaves the old segment: its
// text, and the answer over it.
TEST_F(KeepPolicyTest, AFailedPutLeavesTheOldSegment) {
  Agent a = Make(Json{{"group_size", 1}}, /*blocks=*/40);
  ASSERT_TRUE(a.policy);
  ASSERT_TRUE(a.policy->Segments(Put("door", kDoor)).ok());
  ASSERT_TRUE(a.policy->Segments(Put("key", kKey)).ok());
  const std::vector<float> before = Ask(a.policy.get(), kQuestion);
  auto failed = a.policy->Segments(Put("door", std::string(240, 'd')));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), ErrorCode::kResourceExhausted) << failed.status().ToString();
  auto list = a.policy->Segments(List());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(Names(*list), (std::vector<std::string>{"door", "key"}));
  EXPECT_EQ((*list)[0]["text"], kDoor);
  EXPECT_LT(MaxAbsDiff(before, Ask(a.policy.get(), kQuestion)), 1e-5f);

  // Through the runtime: a put refused (too long for the context) changes nothing, in RAM or
  // in the store.
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, *rt->ValidateMemory("keep", Json::object())).ok());
  ASSERT_TRUE(rt->Segments(ada_, Put("door", kDoor)).ok());
  EXPECT_EQ(rt->Segments(ada_, Put("door", std::string(400, 'd'))).status().code(),
            ErrorCode::kOutOfRange);
  EXPECT_EQ((*rt->Segments(ada_, List()))[0]["text"], kDoor);
  EXPECT_EQ((*Runtime()->Segments(ada_, List()))[0]["text"], kDoor);
}

// A put whose save fails (the file system refuses a write) answers the error, and the agent
// keeps the segment as it was, in RAM (the memory is reloaded from the store) and on disk.
TEST_F(KeepPolicyTest, AFailedSaveLeavesTheOldSegment) {
  store_.reset();
  store::testing::FaultyFs fs;
  store::StoreOptions o{dir_.path(), std::string(32, 'a'), 257};
  o.file_ops = &fs;
  auto reopened = store::AgentStore::Open(o);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_.emplace(std::move(*reopened));
  auto rt = Runtime();
  ASSERT_TRUE(rt->CreateAgent(ada_, *rt->ValidateMemory("keep", Json::object())).ok());
  ASSERT_TRUE(rt->Segments(ada_, Put("door", kDoor)).ok());
  fs.FailNth(1, store::testing::FsCall::kWrite);
  auto failed = rt->Segments(ada_, Put("door", "The red door is open."));
  ASSERT_TRUE(fs.fired());
  EXPECT_EQ(failed.status().code(), ErrorCode::kIo) << failed.status().ToString();
  fs.FailNth(0);
  auto list = rt->Segments(ada_, List());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0]["text"], kDoor);
  EXPECT_EQ((*Runtime()->Segments(ada_, List()))[0]["text"], kDoor);
  // A new key's put fails the same way and leaves no segment behind.
  fs.FailNth(1, store::testing::FsCall::kWrite);
  EXPECT_EQ(rt->Segments(ada_, Put("key", kKey)).status().code(), ErrorCode::kIo);
  fs.FailNth(0);
  EXPECT_EQ(Names(*rt->Segments(ada_, List())), (std::vector<std::string>{"door"}));
  ASSERT_TRUE(rt->Segments(ada_, Put("door", "The red door is open.")).ok());
  EXPECT_EQ((*Runtime()->Segments(ada_, List()))[0]["text"], "The red door is open.");
}

TEST_F(KeepPolicyTest, AnEncoderIsNeededOnlyForRetrievalOrGroups) {
  env_.encoder = nullptr;
  auto spec = ParseMemorySpec(env_, "keep", Json::object());
  ASSERT_TRUE(spec.ok());
  kv::KvPool pool(model_->kv_geometry(8), 4096, Formats());
  auto refused = spec->kind->create(env_, spec->config, &pool);
  EXPECT_EQ(refused.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("scripts/install_deps.sh --model minilm"),
            std::string::npos);
  Agent plain = Make(Json{{"group_size", 1}});
  ASSERT_TRUE(plain.policy);
  ASSERT_TRUE(plain.policy->Segments(Put("door", kDoor)).ok());
  Ask(plain.policy.get(), kQuestion);
  EXPECT_EQ(plain.policy->Report()["segments_read"], Json({"door"}));
}

// A group quiet for static_after steps is cached jointly by the Commit that ends the step, so
// the next request computes no cache before its first token.
TEST_F(KeepPolicyTest, CommitPromotesQuietGroupsOffTheNextRequestsPath) {
  Agent a = Make(Json{{"static_after", 1}, {"group_size", 4}});
  ASSERT_TRUE(a.policy);
  ASSERT_TRUE(a.policy->Segments(Put("door", kDoor)).ok());
  ASSERT_TRUE(a.policy->Segments(Put("key", kKey)).ok());
  Ask(a.policy.get(), kQuestion);
  const Json first = a.policy->Report();
  EXPECT_EQ(first["encoded_caches"], 2);  // the puts
  ASSERT_TRUE(first.contains("maintenance")) << first.dump();
  EXPECT_EQ(first["maintenance"]["encoded_caches"], 1);  // the group's joint cache
  const Result<Json> list = a.policy->Segments(List());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const Json& s : *list) EXPECT_TRUE(s["static"].get<bool>());
  Ask(a.policy.get(), kQuestion);
  EXPECT_EQ(a.policy->Report()["encoded_caches"], 0);
  EXPECT_FALSE(a.policy->Report().contains("maintenance"));
}

// With top_k 1 a request reads one segment of two.
TEST_F(KeepPolicyTest, TopKReadsTheNearestSegments) {
  Agent a = Make(Json{{"top_k", 1}, {"group_size", 1}});
  ASSERT_TRUE(a.policy);
  ASSERT_TRUE(a.policy->Segments(Put("door", kDoor)).ok());
  ASSERT_TRUE(a.policy->Segments(Put("key", kKey)).ok());
  Ask(a.policy.get(), kQuestion);
  EXPECT_EQ(a.policy->Report()["segments_read"].size(), 1u);
}

}  // namespace
}  // namespace kvmem::memory
