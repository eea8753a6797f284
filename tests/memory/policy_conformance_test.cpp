// Every row of the memory-policy table through the same cases (as ops_test runs every ISA): an
// agent created with the policy, three turns (each prompt resending the conversation), then a
// runtime restarted on the store answers a fourth turn exactly as the runtime that never
// stopped (same reply, rows and report); a hostile state blob and a hostile config are refused
// by the row's own restore and parser with a clear error. The rows' configs are small enough
// that the tiny model's histories exercise them (memart retrieves, h2o evicts, intentkv prunes).
// A row whose memory is segments (keep) gets two segments before the first turn: the turns read
// them, and the restart restores them.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>

#include "agent_runtime_fixture.h"
#include "memory/policy/policy_table.h"

namespace kvmem::memory {
namespace {

// A report without the wall-clock seconds maintenance took (the one part no two runs share).
Json Untimed(Json report) {
  if (report.is_object() && report.contains("maintenance")) report["maintenance"].erase("seconds");
  return report;
}

class PolicyConformanceTest : public testing::AgentRuntimeFixture,
                              public ::testing::WithParamInterface<std::string> {
 protected:
  // The config each row runs with: defaults unless a budget must bite on the tiny histories.
  static Json ConfigFor(const std::string& policy) {
    static const std::map<std::string, Json> small = {
        {"memart", {{"block_size", 8}, {"top_k", 2}}},
        {"h2o", {{"budget", 12}}},
        {"intentkv", {{"budget", 12}}},
        // Blocks of 32 bytes: the three turns build episodes, compress tails into them and
        // regroup; uniform budgets (the sensitivity profile has its own tests).
        {"epicache",
         {{"budget", 16},
          {"block", 32},
          {"episodes", 2},
          {"segment", 1},
          {"medoids", 1},
          {"layer_budgets", "uniform"}}},
    };
    auto it = small.find(policy);
    return it == small.end() ? Json::object() : it->second;
  }
};

// The segments a row with segments holds (PolicyKind::segments).
const SegmentRequest kSegments[] = {
    {SegmentRequest::Op::kPut, "notebook", "The red notebook is in the top drawer."},
    {SegmentRequest::Op::kPut, "bicycle", "The green bicycle has a bell and a basket."},
};

const std::string kTurns[] = {
    "Ada keeps a red notebook in the top drawer of her desk at home.",
    " She also owns a green bicycle with a bell and a basket.",
    " On Sundays she rides it to the market by the river.",
    " Where is the notebook?",
};

TEST_P(PolicyConformanceTest, ThreeTurnsRestartAndReplyAsTheLiveRuntime) {
  const std::string name = GetParam();
  auto live = Runtime();
  auto spec = live->ValidateMemory(name, ConfigFor(name));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_TRUE(live->CreateAgent(ada_, *spec).ok());
  if (spec->kind->segments) {
    for (const SegmentRequest& s : kSegments) {
      auto put = live->Segments(ada_, s);
      ASSERT_TRUE(put.ok()) << put.status().ToString();
    }
  } else {
    EXPECT_EQ(live->Segments(ada_, {}).status().code(), ErrorCode::kUnsupported);
  }
  std::string prompt, reply;
  for (int t = 0; t < 3; ++t) {
    prompt += kTurns[t];
    const TurnResult r = Turn(*live, &ada_, prompt, &reply);
    EXPECT_GT(r.completion_tokens, 0);
    EXPECT_EQ(r.kv_tokens, live->Get(ada_)->tokens);
    prompt += reply;
  }
  auto stored = store_->ReadMemory(ada_);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->policy, name);
  EXPECT_EQ(stored->config, spec->config);

  auto restarted = Runtime();
  auto listed = restarted->Get(ada_);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->policy, name);
  EXPECT_EQ(listed->config, spec->config);
  prompt += kTurns[3];
  std::string warm_reply, hot_reply;
  const TurnResult warm = Turn(*restarted, &ada_, prompt, &warm_reply);
  const TurnResult hot = Turn(*live, &ada_, prompt, &hot_reply);
  EXPECT_EQ(warm_reply, hot_reply);
  EXPECT_FALSE(hot_reply.empty());
  EXPECT_EQ(warm.kv_tokens, hot.kv_tokens);
  EXPECT_EQ(warm.prompt.prompt_tokens, hot.prompt.prompt_tokens);
  EXPECT_EQ(warm.prompt.cached_tokens, hot.prompt.cached_tokens);
  EXPECT_EQ(Untimed(warm.memory_report), Untimed(hot.memory_report));
  EXPECT_EQ(restarted->Get(ada_)->last_turn, warm.memory_report);
  if (name == "h2o") {  // the budget bit: each list read at most 12 rows of the history
    EXPECT_LE(hot.memory_report["history_rows_read"].get<double>(), 12.0);
    EXPECT_GT(hot.memory_report["kv_len_decode"].get<double>(), 12.0);
  }
  if (name == "intentkv") {  // pruned to 12 history rows beside the forced ones; blocks freed
    EXPECT_GT(hot.memory_report["dead_rows"].get<int64_t>(), 0);
    EXPECT_LE(hot.memory_report["live_rows"].get<int64_t>(),
              std::max<int64_t>(12, hot.memory_report["forced_rows"].get<int64_t>()) + 1);
    EXPECT_EQ(hot.prompt.cached_tokens, hot.prompt.prompt_tokens - hot.memory_report["prefill_tokens"].get<int64_t>());
  }
  if (name == "memart") {
    EXPECT_GT(hot.memory_report["retrieved_rows"].get<int64_t>(), 0);
  }
  if (name == "keep") {  // the turns read the segments
    EXPECT_EQ(hot.memory_report["segments_read"], Json({"notebook", "bicycle"}));
  }
  if (name == "epicache") {  // the history was compressed into episodes of at most 16 rows
    EXPECT_EQ(hot.memory_report["episodes"].get<int>(), 2);
    EXPECT_LE(hot.memory_report["episode_rows"].get<int64_t>(),
              16 * model_->spec().n_layers * model_->spec().n_kv_heads);
    EXPECT_GE(hot.memory_report["episode"].get<int>(), 0);
  }
}

TEST_P(PolicyConformanceTest, HostileStateAndConfigAreRefused) {
  const std::string name = GetParam();
  auto rt = Runtime();
  const PolicyKind& kind = **FindPolicyKind(name);
  auto spec = rt->ValidateMemory(name, ConfigFor(name));
  ASSERT_TRUE(spec.ok());
  for (const Json& state :
       {Json{{"scores", 5}}, Json{{"evicted", {{-1, 3}}}},
        Json{{"scored_rows", 1}, {"scores", "!!!!"}, {"evicted", Json::array()}}}) {
    kv::KvPool pool(model_->kv_geometry(8), 64, {kv::KvFormat::kF16, kv::KvFormat::kF16});
    StoredMemory hostile;
    hostile.rows = std::make_unique<kv::KvSequence>(&pool);
    hostile.state = state;
    PolicyEnv env;
    env.model = model_.get();
    env.tok = &tok_;
    env.n_ctx = 512;
    env.encoder = &*encoder_;
    auto p = kind.restore(env, spec->config, &pool, std::move(hostile));
    EXPECT_EQ(p.status().code(), ErrorCode::kCorrupt) << state.dump();
    EXPECT_FALSE(p.status().message().empty());
  }
  for (const Json& config :
       {Json{{"no_such_field", 1}}, Json(3), Json{{"budget", -1}}, Json{{"top_k", 1e9}}}) {
    store::MemoryRecord record;
    record.policy = name;
    record.config = config;
    PolicyEnv env;
    env.model = model_.get();
    env.encoder = &*encoder_;
    auto parsed = SpecFromRecord(env, record);
    EXPECT_EQ(parsed.status().code(), ErrorCode::kCorrupt) << config.dump();
  }
}

// A turn that is aborted after its prefill and a few decoded tokens leaves the memory as it was:
// the next turn computes the same logits and report as over a memory that never saw it.
TEST_P(PolicyConformanceTest, AbortLeavesTheMemoryAsBefore) {
  const std::string name = GetParam();
  const PolicyKind& kind = **FindPolicyKind(name);
  PolicyEnv env;
  env.model = model_.get();
  env.tok = &tok_;
  env.threads = &threads_;
  engine::StepBatcher batcher(*model_, &threads_, {});
  env.compute = &batcher;
  env.n_ctx = 512;
  env.max_batch = 16;
  env.encoder = &*encoder_;
  auto spec = ParseMemorySpec(env, name, ConfigFor(name));
  ASSERT_TRUE(spec.ok());
  const int64_t rows = kind.rows_needed(env, spec->config);
  kv::KvPool pool_a(model_->kv_geometry(8), static_cast<int>(rows / 8 + 2),
                    {kv::KvFormat::kF16, kv::KvFormat::kF16});
  kv::KvPool pool_b(model_->kv_geometry(8), static_cast<int>(rows / 8 + 2),
                    {kv::KvFormat::kF16, kv::KvFormat::kF16});
  auto a = kind.create(env, spec->config, &pool_a);
  auto b = kind.create(env, spec->config, &pool_b);
  ASSERT_TRUE(a.ok() && b.ok());
  if (spec->kind->segments) {
    for (MemoryPolicy* p : {a->get(), b->get()}) {
      for (const SegmentRequest& s : kSegments) ASSERT_TRUE(p->Segments(s).ok());
    }
  }
  std::vector<float> la, lb;
  const std::string p1 = kTurns[0] + kTurns[1];
  for (MemoryPolicy* p : {a->get(), b->get()}) {
    auto plan = p->Plan({p1, ""});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_TRUE(p->Apply(*plan, &la).ok());
    ASSERT_TRUE(p->Commit().ok());
  }
  // a: a turn aborted after three decoded tokens.
  const std::string p2 = p1 + kTurns[2];
  auto plan = (*a)->Plan({p2, ""});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE((*a)->Apply(*plan, &la).ok());
  for (int32_t t : {70, 71, 72}) ASSERT_TRUE((*a)->Step(t, &la).ok());
  (*a)->Abort();
  EXPECT_EQ((*a)->n_rows(), (*b)->n_rows());
  EXPECT_EQ((*a)->text(), (*b)->text());
  const std::string p3 = p1 + kTurns[3];
  auto plan_a = (*a)->Plan({p3, ""});
  auto plan_b = (*b)->Plan({p3, ""});
  ASSERT_TRUE(plan_a.ok() && plan_b.ok());
  EXPECT_EQ(plan_a->prefill, plan_b->prefill);
  ASSERT_TRUE((*a)->Apply(*plan_a, &la).ok());
  ASSERT_TRUE((*b)->Apply(*plan_b, &lb).ok());
  EXPECT_EQ(la, lb);
  EXPECT_EQ(Untimed((*a)->Report()), Untimed((*b)->Report()));
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyKind& k : PolicyKinds()) names.push_back(k.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(EveryRow, PolicyConformanceTest, ::testing::ValuesIn(PolicyNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvmem::memory
