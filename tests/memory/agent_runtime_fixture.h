// The agent runtime tests' set-up: a tiny random llama, a byte-level tokenizer (one token per
// byte after a BOS, so token counts are byte counts), a store in a temporary directory, and
// greedy turns.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "../model/tiny_model.h"
#include "../tokenizer/byte_tokenizer.h"
#include "memory/agents/agent_runtime.h"
#include "test_util.h"

namespace kvmem::memory::testing {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

class AgentRuntimeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    TinyConfig c;
    c.n_vocab = 257;  // the byte tokenizer's ids
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 3));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    auto s = store::AgentStore::Open({dir_.path(), std::string(32, 'a'), 257});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_.emplace(std::move(*s));
    // The tiny random BERT of the sentence encoder's tests (no download): what epicache clusters
    // and routes with.
    auto enc = embed::SentenceEncoder::Load(std::string(KVMEM_TESTDATA_DIR) + "/embed/tiny");
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    encoder_.emplace(std::move(*enc));
  }

  std::unique_ptr<AgentRuntime> Runtime(size_t hot_budget = size_t{1} << 30,
                                        int64_t max_history_tokens = int64_t{1} << 17) {
    AgentRuntimeOptions o;
    o.max_history_tokens = max_history_tokens;
    o.formats = {kv::KvFormat::kF16, kv::KvFormat::kF16};  // head_dim 8: no 32-value blocks
    o.block_rows = 8;
    o.n_ctx = 512;
    o.max_batch = 16;
    o.hot_budget_bytes = hot_budget;
    o.encoder = &*encoder_;
    return std::make_unique<AgentRuntime>(*model_, tok_, &threads_, &*store_, o);
  }

  // A greedy turn; the reply text goes to *reply.
  TurnResult Turn(AgentRuntime& rt, const store::AgentKey* key, const std::string& text,
                  std::string* reply, int max_tokens = 6, const std::string& focus = "") {
    TurnParams p;
    p.max_tokens = max_tokens;
    p.focus = focus;
    p.sampler.temperature = 0;
    TurnCallbacks cb;
    reply->clear();
    cb.on_text = [reply](std::string_view s) {
      reply->append(s);
      return true;
    };
    auto r = rt.RunTurn(key, text, p, cb);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : TurnResult{};
  }

  store::testing::TempDir dir_;
  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  tokenizer::Tokenizer tok_ = tokenizer::testing::ByteTokenizer();
  ThreadPool threads_{2};
  std::optional<store::AgentStore> store_;
  std::optional<embed::SentenceEncoder> encoder_;
  const store::AgentKey ada_{"t", "ada"};
};

}  // namespace kvmem::memory::testing
