// The prefix cache against a run without it, on real models (SmolLM2; Gemma-3 with its
// sliding-window layers, the cached prefix longer than the window) and through the runtime on the
// tiny random model: a turn whose prompt prefix came from the cache computes the same logits, bit
// for bit, as the `none` policy prefilling the whole prompt in a pool of its own (same tokens,
// same positions, same KV format; the forward pass depends neither on the batch nor on how rows
// are split into blocks). Real-model cases skip when the model is not installed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/step_batcher.h"
#include "memory/agent_runtime_fixture.h"
#include "memory/agents/agent_runtime.h"
#include "memory/policy/none_policy.h"
#include "memory/prefix/prefix_cached_policy.h"
#include "tokenizer/gguf_config.h"
#include "tokenizer/test_util.h"

namespace kvmem::memory {
namespace {

// A long shared system prompt (~700 tokens on both tokenizers) and questions after it.
std::string System() {
  std::string s = "You are a careful archivist. The inventory follows.\n";
  for (int i = 0; i < 50; ++i) {
    s += "Shelf " + std::to_string(i) + " holds " + std::to_string(i * 7 % 23) +
         " boxes of letters from " + std::to_string(1850 + i * 3) + ".\n";
  }
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Runs `prompt` through `policy`, then `steps` greedy tokens; every logits vector in order.
std::vector<std::vector<float>> RunTurn(MemoryPolicy& policy, const std::string& prompt, int steps,
                                        int64_t* cached) {
  std::vector<std::vector<float>> out;
  auto plan = policy.Plan({prompt, ""});
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return out;
  std::vector<float> logits;
  auto account = policy.Apply(*plan, &logits);
  EXPECT_TRUE(account.ok()) << account.status().ToString();
  if (!account.ok()) return out;
  *cached = account->cached_tokens;
  out.push_back(logits);
  for (int i = 0; i < steps; ++i) {
    EXPECT_TRUE(policy.Step(Argmax(logits), &logits).ok());
    out.push_back(logits);
  }
  EXPECT_TRUE(policy.Commit().ok());
  return out;
}

void ExpectCachedTurnsMatch(const std::filesystem::path& path, kv::KvFormats formats) {
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not installed";
  auto m = model::Model::Load(path.string());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto file = gguf::GgufFile::Open(path.string());
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer::LoadTokenizer(*file);
  ASSERT_TRUE(tok.ok());
  ThreadPool threads(2);
  engine::StepBatcher batcher(**m, &threads, {});
  PolicyEnv env;
  env.model = m->get();
  env.tok = &*tok;
  env.threads = &threads;
  env.compute = &batcher;
  env.n_ctx = 2048;
  env.max_batch = 256;
  prefix::PrefixCache cache((*m)->kv_geometry(prefix::PrefixCache::kBlockRows), formats,
                            size_t{64} << 20, 256);
  kv::KvPool ref_pool((*m)->kv_geometry(256), 2048 / 256 + 2, formats);
  const std::string system = System();
  const std::vector<std::string> prompts = {
      system + "Question: how many boxes are on shelf 12?\nAnswer:",
      system + "Question: which year are the letters on shelf 40 from?\nAnswer:",
      system + "Question: which year are the letters on shelf 40 from?\nAnswer:",
  };
  int window = 0;
  for (const model::LayerSpec& l : (*m)->spec().layers) window = std::max(window, l.sliding_window);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    int64_t cached = -1, ref_cached = -1;
    PrefixCachedPolicy cached_policy(env, &cache, "tenant", 8);
    const auto got = RunTurn(cached_policy, prompts[i], 4, &cached);
    NonePolicy none(env, &ref_pool);
    const auto want = RunTurn(none, prompts[i], 4, &ref_cached);
    EXPECT_EQ(ref_cached, 0);
    const auto n = static_cast<int64_t>(tok->Encode(prompts[i], true, true).size());
    if (i == 0) {
      EXPECT_EQ(cached, 0);
    }
    // The system prompt is shared; the same prompt again matches all but its last token.
    if (i == 1) {
      EXPECT_GT(cached, std::max<int64_t>(window, 500));
    }
    if (i == 2) {
      EXPECT_EQ(cached, n - 1);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t s = 0; s < got.size(); ++s) {
      EXPECT_TRUE(SameBits(got[s], want[s])) << "logits " << s << " differ";
    }
  }
  EXPECT_EQ(cache.stats().turns, 0);
}

TEST(PrefixCacheModel, SmolLm2LogitsEqualThoseWithoutTheCache) {
  ExpectCachedTurnsMatch(tokenizer::testing::SmolLm2Path(),
                         {kv::KvFormat::kQ8_0, kv::KvFormat::kQ8_0});
}

TEST(PrefixCacheModel, Gemma3LogitsEqualThoseWithoutTheCachePastTheWindow) {
  ExpectCachedTurnsMatch(tokenizer::testing::Gemma3Path(),
                         {kv::KvFormat::kF16, kv::KvFormat::kF16});
}

// Through the runtime: cached_tokens, other tenants, n > 1 choices and prompt logprobs on a
// cache hit answer exactly as a runtime without the cache.
class PrefixCacheRuntime : public testing::AgentRuntimeFixture {
 protected:
  std::unique_ptr<AgentRuntime> RuntimeWithCache(size_t bytes) {
    AgentRuntimeOptions o;
    o.formats = {kv::KvFormat::kF16, kv::KvFormat::kF16};
    o.block_rows = 8;
    o.n_ctx = 512;
    o.max_batch = 16;
    o.prefix_cache_bytes = bytes;
    return std::make_unique<AgentRuntime>(*model_, tok_, &threads_, nullptr, o);
  }

  struct Answer {
    TurnResult result;
    std::vector<std::string> texts;
    std::vector<std::vector<engine::TokenLogprob>> logprobs;
  };

  Answer Ask(AgentRuntime& rt, const std::string& prompt, const std::string& tenant, int n = 1,
             bool prompt_logprobs = false) {
    TurnParams p;
    p.max_tokens = 6;
    p.n = n;
    p.tenant = tenant;
    p.logprobs = 3;
    p.prompt_logprobs = prompt_logprobs;
    p.sampler.temperature = n > 1 ? 0.9f : 0.0f;
    p.sampler.seed = 7;
    Answer a;
    a.texts.resize(n);
    a.logprobs.resize(n);
    TurnCallbacks cb;
    cb.on_delta = [&](const ReplyDelta& d) {
      a.texts[d.choice].append(d.text);
      a.logprobs[d.choice].insert(a.logprobs[d.choice].end(), d.logprobs.begin(), d.logprobs.end());
      return true;
    };
    auto r = rt.RunTurn(nullptr, prompt, p, cb);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) a.result = *r;
    return a;
  }

  static void ExpectSame(const Answer& a, const Answer& b) {
    EXPECT_EQ(a.texts, b.texts);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t c = 0; c < a.logprobs.size(); ++c) {
      ASSERT_EQ(a.logprobs[c].size(), b.logprobs[c].size());
      for (size_t i = 0; i < a.logprobs[c].size(); ++i) {
        EXPECT_EQ(a.logprobs[c][i].id, b.logprobs[c][i].id);
        EXPECT_EQ(a.logprobs[c][i].logprob, b.logprobs[c][i].logprob);
      }
    }
    const auto& pa = a.result.prompt.logprobs;
    const auto& pb = b.result.prompt.logprobs;
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].id, pb[i].id);
      if (i > 0) {
        EXPECT_EQ(pa[i].logprob, pb[i].logprob);
      }
    }
  }
};

TEST_F(PrefixCacheRuntime, AnonymousTurnsReuseTheirTenantsPrefixes) {
  auto with = RuntimeWithCache(size_t{8} << 20);
  auto without = RuntimeWithCache(0);
  const std::string system(300, 'x');
  const std::string q1 = system + " first question?", q2 = system + " second one?";
  const Answer a1 = Ask(*with, q1, "acme");
  EXPECT_EQ(a1.result.prompt.cached_tokens, 0);
  ExpectSame(a1, Ask(*without, q1, "acme"));
  // Byte tokenizer: BOS + one token per byte; the system prompt and the space are shared.
  const Answer a2 = Ask(*with, q2, "acme");
  EXPECT_EQ(a2.result.prompt.cached_tokens, 1 + static_cast<int64_t>(system.size()) + 1);
  EXPECT_EQ(a2.result.prompt.prompt_tokens, 1 + static_cast<int64_t>(q2.size()));
  ExpectSame(a2, Ask(*without, q2, "acme"));
  // Another tenant finds nothing of acme's.
  EXPECT_EQ(Ask(*with, q2, "globex").result.prompt.cached_tokens, 0);
  // n > 1 choices and prompt logprobs on a hit.
  const Answer many = Ask(*with, q2, "acme", 3, true);
  EXPECT_EQ(many.result.prompt.cached_tokens, static_cast<int64_t>(q2.size()));  // all but last
  ExpectSame(many, Ask(*without, q2, "acme", 3, true));
  const RuntimeStats s = with->stats();
  EXPECT_GT(s.prefix_cache.tree.hit_tokens, 0);
  EXPECT_EQ(s.prefix_cache.turns, 0);
  EXPECT_EQ(without->stats().prefix_cache.tree.lookups, 0);
}

TEST_F(PrefixCacheRuntime, ConcurrentAnonymousTurnsAnswerAsWithoutTheCache) {
  // Three threads, each asking questions after a system prompt of its own, so every thread's
  // later turns find its prefix; a tiny budget makes every commit evict while others read.
  auto without = RuntimeWithCache(0);
  std::vector<std::string> prompts;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(std::string(120 + 40 * (i % 3), static_cast<char>('a' + i % 3)) +
                      " question " + std::to_string(i) + "?");
  }
  std::vector<std::string> want;
  for (const std::string& p : prompts) want.push_back(Ask(*without, p, "acme").texts[0]);
  for (const size_t budget : {size_t{16} << 10, size_t{8} << 20}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    auto with = RuntimeWithCache(budget);
    std::vector<std::string> got(prompts.size());
    std::vector<std::thread> threads;
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        for (size_t i = static_cast<size_t>(w); i < prompts.size(); i += 3) {
          got[i] = Ask(*with, prompts[i], "acme").texts[0];
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(got, want);
    const RuntimeStats s = with->stats();
    if (budget < (size_t{1} << 20)) {
      EXPECT_GT(s.prefix_cache.tree.evictions, 0);
    } else {
      EXPECT_EQ(s.prefix_cache.tree.evictions, 0);
      EXPECT_GE(s.prefix_cache.tree.hit_tokens, 9 * 120);  // 3 later turns x 3 threads
    }
    EXPECT_EQ(s.prefix_cache.turns, 0);
  }
}

}  // namespace
}  // namespace kvmem::memory
