// Properties of the forward pass on tiny random models (the numeric comparison with an
// independent implementation is tests/oracle/test_forward.py): incremental decode equals batch
// prefill, micro-batching changes nothing, layer stepping and taps see every layer, and rows
// re-positioned without a forward pass read as if computed at their new positions.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/forward.h"
#include "../model/tiny_model.h"

namespace kvmem::engine {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

class ForwardTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyConfig c;
    c.arch = GetParam();
    if (c.arch == "gemma3") {
      // Local layers 0-4 (window 6, RoPE base 1e4) and a global layer 5 with its own base, so
      // that re-positioning must rotate each layer with its own base.
      c.n_layers = 6;
      c.rope_base = 1e6f;
      c.sliding_window = 6;
    }
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 3));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(16), 16);
  }

  std::vector<float> Run(std::span<const int32_t> tokens, int64_t first_pos, bool all,
                         int max_batch = 256) {
    kv::KvSequence seq(pool_.get());
    std::vector<float> logits;
    EXPECT_TRUE(Forward(*model_, &threads_, &seq, tokens, first_pos, all, &logits, max_batch).ok());
    return logits;
  }

  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  const std::vector<int32_t> tokens_ = {1, 5, 9, 33, 2, 60, 17, 17, 40, 8, 3, 12, 50, 7, 21, 30,
                                        44, 6, 19, 25};
};

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "index " << i;
}

TEST_P(ForwardTest, IncrementalDecodeEqualsBatchPrefill) {
  const int n_vocab = model_->spec().n_vocab;
  std::vector<float> batch = Run(tokens_, 0, /*all=*/true);
  kv::KvSequence seq(pool_.get());
  std::vector<float> step;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    std::vector<float> logits;
    ASSERT_TRUE(Forward(*model_, &threads_, &seq, std::span(tokens_).subspan(i, 1), i, false,
                        &logits)
                    .ok());
    step.insert(step.end(), logits.begin(), logits.end());
  }
  ASSERT_EQ(step.size(), tokens_.size() * n_vocab);
  // Same math in another order; activation quantization is per token, so only summation order
  // differs.
  ExpectClose(batch, step, 1e-4f);
}

// Past 512 rows a decode step splits each KV head's rows into chunks spread over the threads
// and merged by whichever thread completes the last one; a prefill batch runs and merges the
// same chunks in one thread per (token, KV head). Both must give the same logits.
TEST_P(ForwardTest, LongDecodeEqualsBatchPrefill) {
  const int n_vocab = model_->spec().n_vocab;
  constexpr int kPrompt = 600, kDecode = 40;
  std::vector<int32_t> tokens(kPrompt + kDecode);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 61);
  kv::KvPool pool(model_->kv_geometry(64), 2 * (kPrompt + kDecode) / 64 + 2);
  kv::KvSequence batch_seq(&pool), seq(&pool);
  std::vector<float> batch, logits;
  ASSERT_TRUE(Forward(*model_, &threads_, &batch_seq, tokens, 0, /*all=*/true, &batch).ok());
  ASSERT_TRUE(
      Forward(*model_, &threads_, &seq, std::span(tokens).first(kPrompt), 0, false, &logits)
          .ok());
  for (int i = kPrompt; i < kPrompt + kDecode; ++i) {
    ASSERT_TRUE(
        Forward(*model_, &threads_, &seq, std::span(tokens).subspan(i, 1), i, false, &logits)
            .ok());
    const std::vector<float> want(batch.begin() + static_cast<size_t>(i) * n_vocab,
                                  batch.begin() + static_cast<size_t>(i + 1) * n_vocab);
    ExpectClose(want, logits, 1e-4f);
  }
}

TEST_P(ForwardTest, MicroBatchesChangeNothing) {
  ExpectClose(Run(tokens_, 0, true), Run(tokens_, 0, true, /*max_batch=*/3), 1e-4f);
}

TEST_P(ForwardTest, LayerSteppingAndQueryTap) {
  kv::KvSequence seq(pool_.get());
  ForwardPass fp(*model_, &threads_);
  std::vector<int> layers_seen;
  fp.set_tap([&](const TapContext& tap) {
    const int layer = tap.layer();
    const int n = tap.n_tokens();
    std::span<const float> q = tap.q();
    layers_seen.push_back(layer);
    EXPECT_EQ(n, 4);
    EXPECT_EQ(q.size(), size_t(4) * model_->spec().q_dim());
  });
  Batch b;
  b.tokens = {1, 2, 3, 4};
  b.positions = {0, 1, 2, 3};
  ASSERT_TRUE(fp.Begin(b, &seq).ok());
  while (!fp.done()) fp.StepLayer();
  std::vector<float> stepped;
  fp.Finish(&stepped);
  std::vector<int> all_layers(model_->spec().n_layers);
  for (int l = 0; l < model_->spec().n_layers; ++l) all_layers[l] = l;
  EXPECT_EQ(layers_seen, all_layers);
  const int32_t toks[] = {1, 2, 3, 4};
  ExpectClose(stepped, Run(toks, 0, false), 0.0f);
}

// Cache the prefix at positions 0.., move its rows to 40.. without a forward pass, then decode
// one token at the end: it must match a run that computed the prefix at 40.. directly.
TEST_P(ForwardTest, RepositionedRowsReadAsComputedThere) {
  const auto prefix = std::span(tokens_).first(12);
  const int32_t next[] = {tokens_[12]};
  const int64_t shift = 40;

  kv::KvSequence moved(pool_.get());
  std::vector<float> logits_moved, logits_direct;
  ASSERT_TRUE(Forward(*model_, &threads_, &moved, prefix, 0, false, &logits_moved).ok());
  auto& runs = moved.view().mutable_layer(0);  // positions are per view; shift every layer's
  for (auto& r : runs) r.first_pos += shift;
  for (int l = 1; l < model_->spec().n_layers; ++l) moved.view().mutable_layer(l) = runs;
  for (const auto& r : runs) {
    pool_->Reposition({r.block, r.first_row}, r.n_rows, r.first_pos, model_->rope_specs());
  }
  ASSERT_TRUE(Forward(*model_, &threads_, &moved, next, 12 + shift, false, &logits_moved).ok());

  kv::KvSequence direct(pool_.get());
  ASSERT_TRUE(Forward(*model_, &threads_, &direct, prefix, shift, false, &logits_direct).ok());
  ASSERT_TRUE(Forward(*model_, &threads_, &direct, next, 12 + shift, false, &logits_direct).ok());
  // Re-rotating an f16 key rounds it once more: allow a few f16 ulps of the logits' scale.
  ExpectClose(logits_moved, logits_direct, 2e-2f);
  // And the move mattered: logits at the old positions differ.
  kv::KvSequence orig(pool_.get());
  std::vector<float> logits_orig;
  ASSERT_TRUE(Forward(*model_, &threads_, &orig, prefix, 0, false, &logits_orig).ok());
  ASSERT_TRUE(Forward(*model_, &threads_, &orig, next, 12 + shift, false, &logits_orig).ok());
  float max_diff = 0;
  for (size_t i = 0; i < logits_orig.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(logits_orig[i] - logits_direct[i]));
  }
  EXPECT_GT(max_diff, 0.05f);
}

TEST_P(ForwardTest, RejectsOutOfVocabularyToken) {
  kv::KvSequence seq(pool_.get());
  std::vector<float> logits;
  const int32_t bad[] = {1, 64};
  Status st = Forward(*model_, &threads_, &seq, bad, 0, false, &logits);
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(seq.n_rows(), 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardTest,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));

}  // namespace
}  // namespace kvmem::engine
