// H2O's accumulated attention (memory/eviction/attention_scores.h) on tiny random llama and qwen2
// models with GQA (4 query heads over 2 KV heads, f16 KV), checked against a double-precision
// softmax computed directly from the post-RoPE queries (captured by a plain tap in one single pass)
// and the keys the pool stores: a history in micro-batches of 16 plus a question in a second pass
// give, per (layer, KV head) and row, the sum over all 40 tokens and both query heads of the
// group of the causal softmax weight; each (layer, KV head) sums to tokens x group size.
#include "memory/eviction/attention_scores.h"

#include <gtest/gtest.h>

#include <cmath>

#include "../model/tiny_model.h"

namespace kvmem::memory {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

class AttentionScoresTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyConfig c;  // 2 layers, 4 heads, 2 KV heads, head_dim 8
    c.arch = GetParam();
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 11));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
  }

  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
};

TEST_P(AttentionScoresTest, EqualTheModelsSoftmaxSummedOverTokensAndGroupHeads) {
  const model::Model& model = *model_;
  const model::ModelSpec& spec = model.spec();
  ThreadPool threads(2);
  const int n = 40, n_hist = 30;
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 29 + 7 + i * i) % spec.n_vocab);

  kv::KvPool pool(model.kv_geometry(16), 16);
  kv::KvSequence seq(&pool);
  AttentionScores scores(spec);
  const std::span<const int32_t> all(tokens);
  ASSERT_TRUE(ForwardScored(model, &threads, &seq, all.first(n_hist), 0, &scores, 16).ok());
  ASSERT_TRUE(ForwardScored(model, &threads, &seq, all.subspan(n_hist), n_hist, &scores).ok());
  ASSERT_EQ(seq.n_rows(), n);
  ASSERT_EQ(scores.n_rows(), n);

  // The reference: one pass of all tokens, its queries captured per layer.
  kv::KvSequence ref_seq(&pool);
  std::vector<std::vector<float>> q(spec.n_layers);  // (n, n_heads, head_dim)
  engine::ForwardPass fp(model, &threads);
  fp.set_tap([&](const engine::TapContext& tap) {
    q[tap.layer()].assign(tap.q().begin(), tap.q().end());
  });
  engine::Batch b;
  b.tokens = tokens;
  for (int i = 0; i < n; ++i) b.positions.push_back(i);
  ASSERT_TRUE(fp.Begin(b, &ref_seq).ok());
  while (!fp.done()) fp.StepLayer();
  const std::vector<kv::RowRef> rows(fp.rows().begin(), fp.rows().end());

  const int hd = spec.head_dim_k, group = spec.n_heads / spec.n_kv_heads;
  std::vector<float> k(spec.k_dim()), v(spec.v_dim());
  for (int l = 0; l < spec.n_layers; ++l) {
    std::vector<std::vector<float>> keys(n);  // (n, k_dim) as stored
    for (int j = 0; j < n; ++j) {
      pool.ReadToken(rows[j], l, k.data(), v.data());
      keys[j] = k;
    }
    std::vector<double> ref(static_cast<size_t>(spec.n_kv_heads) * n, 0.0);
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < spec.n_heads; ++h) {
        const int g = h / group;
        const float* qh = q[l].data() + (static_cast<size_t>(t) * spec.n_heads + h) * hd;
        std::vector<double> logit(t + 1);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double{qh[d]} * keys[j][g * hd + d];
          logit[j] = dot * spec.attn_scale();
          mx = std::max(mx, logit[j]);
        }
        for (int j = 0; j <= t; ++j) sum += std::exp(logit[j] - mx);
        for (int j = 0; j <= t; ++j) ref[g * n + j] += std::exp(logit[j] - mx) / sum;
      }
    }
    for (int g = 0; g < spec.n_kv_heads; ++g) {
      const std::span<const double> got = scores.of(l, g);
      double total = 0;
      for (int j = 0; j < n; ++j) {
        EXPECT_NEAR(got[j], ref[g * n + j], 1e-4 * (1 + ref[g * n + j]))
            << l << "," << g << "," << j;
        total += got[j];
      }
      EXPECT_NEAR(total, double{n} * group, 1e-3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, AttentionScoresTest, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace kvmem::memory
