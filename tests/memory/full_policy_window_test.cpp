// The `full` policy over a model with sliding-window layers (a tiny random gemma3, window 4): a
// question asked of the memory and aborted leaves the cached conversation usable, so the next
// question prefills only itself (rows are given back at Commit, not by the aborted pass), and a
// committed turn gives back the window's rows that no later token reads.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "../model/tiny_model.h"
#include "../tokenizer/byte_tokenizer.h"
#include "memory/full/full_policy.h"

namespace kvmem::memory {
namespace {

TEST(FullPolicyWindow, AnAbortedQuestionKeepsThePrefixAndCommitReleases) {
  model::testing::TinyConfig c;
  c.arch = "gemma3";
  c.n_vocab = 257;
  c.sliding_window = 4;
  model::testing::TempFile file(model::testing::BuildTinyGguf(c, 5));
  auto m = model::Model::Load(file.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const tokenizer::Tokenizer tok = tokenizer::testing::ByteTokenizer();
  ThreadPool threads(2);
  PolicyEnv env;
  env.model = m->get();
  env.tok = &tok;
  env.threads = &threads;
  engine::StepBatcher batcher(**m, &threads, {});
  env.compute = &batcher;
  env.n_ctx = 256;
  env.max_batch = 16;
  kv::KvPool pool((*m)->kv_geometry(8), 64, {kv::KvFormat::kF16, kv::KvFormat::kF16});
  FullPolicy p(env, &pool);
  const std::string history = "The red notebook is in the top drawer of the desk.";
  std::vector<float> logits;
  auto plan = p.Plan({history, ""});
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(p.Apply(*plan, &logits).ok());
  ASSERT_TRUE(p.Commit().ok());
  const int64_t rows = p.n_rows();
  const size_t committed_bytes = pool.bytes_in_use();
  for (const std::string q : {" Where is it?", " What colour is it?"}) {
    const std::string prompt = history + q;  // the plan points into it
    auto ask = p.Plan({prompt, ""});
    ASSERT_TRUE(ask.ok());
    EXPECT_EQ(ask->kept_rows, rows) << q;  // only the question is prefilled
    EXPECT_EQ(static_cast<int64_t>(ask->prefill.size()), static_cast<int64_t>(q.size()));
    ASSERT_TRUE(p.Apply(*ask, &logits).ok());
    ASSERT_TRUE(p.Step(65, &logits).ok());
    p.Abort();
    EXPECT_EQ(p.n_rows(), rows);
  }
  // The committed turn gave back the local layers' whole blocks out of the window.
  EXPECT_LT(committed_bytes, static_cast<size_t>((rows + 7) / 8) * pool.bytes_per_block());
}

}  // namespace
}  // namespace kvmem::memory
