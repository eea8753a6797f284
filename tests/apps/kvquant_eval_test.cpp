// The KV-format evaluator on a tiny random-weight model (token ids, no tokenizer): the F16
// reference against itself has KL exactly 0, coarser formats lose more, micro-batching does not
// change the numbers; plus format-list parsing and window planning.
#include "eval/kvquant_eval.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../model/tiny_model.h"

namespace kvmem::eval {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

TEST(KvVariant, ParsesSymmetricAndMixedSpecs) {
  auto one = ParseKvVariant("f16");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->name(), "f16");
  EXPECT_FALSE(ParseKvVariant("q9_9").ok());
  EXPECT_FALSE(ParseKvVariant("").ok());
  EXPECT_FALSE(ParseKvVariant("f16:").ok());
  EXPECT_FALSE(ParseKvVariants("f16,,f16").ok());
  auto list = ParseKvVariants("f16,f16:f16");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 2u);
  auto mixed = ParseKvVariant("q8_0:q4_0");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(mixed->formats.k, kv::KvFormat::kQ8_0);
  EXPECT_EQ(mixed->formats.v, kv::KvFormat::kQ4_0);
  EXPECT_EQ(mixed->name(), "q8_0/q4_0");
  auto slash = ParseKvVariant("q8_0/q4_0");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->name(), "q8_0/q4_0");
  auto sym = ParseKvVariant("kivi4");
  ASSERT_TRUE(sym.ok()) << sym.status().ToString();
  EXPECT_EQ(sym->name(), "kivi4");
}

TEST(PlanWindows, TakesConversationsInTurnThenLaterChunks) {
  const std::vector<int64_t> docs = {5000, 3000, 9000};
  auto w = PlanWindows(docs, 2048, 7);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<std::pair<size_t, int64_t>> expected = {
      {0, 0}, {1, 0}, {2, 0}, {0, 2048}, {2, 2048}, {2, 4096}, {2, 6144}};
  ASSERT_EQ(w->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*w)[i].doc, expected[i].first) << i;
    EXPECT_EQ((*w)[i].begin, expected[i].second) << i;
  }
  auto too_many = PlanWindows(docs, 2048, 8);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), ErrorCode::kOutOfRange);
  EXPECT_FALSE(PlanWindows(docs, 10000, 1).ok());
}

class KvQuantEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // head_dim 32: one quantization block per head row.
    TinyConfig c;
    c.n_embd = 64;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 32;
    c.n_ff = 96;
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 11));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> id(0, c.n_vocab - 1);
    for (int i = 0; i < 300; ++i) tokens_.push_back(id(rng));
  }

  std::vector<VariantResult> Evaluate(const std::string& formats, int micro_batch,
                                      VariantResult* reference) {
    auto variants = ParseKvVariants(formats);
    EXPECT_TRUE(variants.ok()) << variants.status().ToString();
    auto ev = KvQuantEvaluator::Create(*model_, &threads_, *variants, 512, micro_batch);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    if (!ev.ok()) return {};
    int64_t last = 0;
    EXPECT_TRUE((*ev)->AddWindow(std::span(tokens_).first(200), [&](int64_t d) { last = d; }).ok());
    EXPECT_EQ(last, (*ev)->rows_per_window(200));
    EXPECT_TRUE((*ev)->AddWindow(std::span(tokens_).last(100)).ok());
    *reference = (*ev)->reference();
    return (*ev)->results();
  }

  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  ThreadPool threads_{2};
  std::vector<int32_t> tokens_;
};

TEST_F(KvQuantEvalTest, F16AgainstItselfIsExact) {
  VariantResult ref;
  std::vector<VariantResult> r = Evaluate("f16", 64, &ref);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(ref.sums.n, 199 + 99);
  EXPECT_EQ(r[0].sums.n, 199 + 99);
  EXPECT_EQ(r[0].sums.kl, 0.0);
  EXPECT_EQ(r[0].sums.max_kl, 0.0);
  EXPECT_EQ(r[0].sums.nll, ref.sums.nll);
  EXPECT_GT(ref.sums.perplexity(), 1.0);
  EXPECT_TRUE(std::isfinite(ref.sums.perplexity()));
  EXPECT_EQ(ref.bytes_per_token, 2.0 * 2 /*layers*/ * 1 /*kv head*/ * (32 + 32));
}

TEST_F(KvQuantEvalTest, MicroBatchingChangesNothing) {
  VariantResult a, b, c;
  Evaluate("f16", 256, &a);
  Evaluate("f16", 7, &b);
  Evaluate("f16", 199, &c);  // the 200-token window ends in a chunk of one unscored token
  EXPECT_EQ(a.sums.n, b.sums.n);
  EXPECT_EQ(a.sums.n, c.sums.n);
  EXPECT_NEAR(a.sums.mean_nll(), b.sums.mean_nll(), 1e-5);
  EXPECT_NEAR(a.sums.mean_nll(), c.sums.mean_nll(), 1e-5);
}

TEST_F(KvQuantEvalTest, RejectsBadWindows) {
  auto created = KvQuantEvaluator::Create(*model_, &threads_, {}, 128);
  ASSERT_TRUE(created.ok());
  KvQuantEvaluator& ev = **created;
  EXPECT_EQ(ev.AddWindow(std::span(tokens_).first(1)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ev.AddWindow(std::span(tokens_).first(129)).code(), ErrorCode::kInvalidArgument);
  std::vector<int32_t> bad = {1, 2, 64};
  EXPECT_EQ(ev.AddWindow(bad).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ev.reference().sums.n, 0);
  EXPECT_FALSE(KvQuantEvaluator::Create(*model_, &threads_, {}, 0).ok());
}

TEST(KvQuantEval, FormatsThatCannotStoreTheHeadsAreRejected) {
  TinyConfig c;  // head_dim 8: not a multiple of the 32-wide quantization blocks
  TempFile file(BuildTinyGguf(c, 1));
  auto m = model::Model::Load(file.path());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ThreadPool threads(1);
  auto ev = KvQuantEvaluator::Create(**m, &threads, *ParseKvVariants("q8_0"), 64);
  ASSERT_FALSE(ev.ok());
  EXPECT_EQ(ev.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(KvQuantEvaluator::Create(**m, &threads, *ParseKvVariants("f16"), 64).ok());
}

TEST_F(KvQuantEvalTest, CoarserFormatsLoseMore) {
  VariantResult ref;
  std::vector<VariantResult> r = Evaluate("q8_0,q4_0,kivi4,q8_0:q4_0", 64, &ref);
  ASSERT_EQ(r.size(), 4u);
  const MetricSums &q8 = r[0].sums, &q4 = r[1].sums, &kivi = r[2].sums, &mixed = r[3].sums;
  EXPECT_GT(q8.mean_kl(), 0.0);
  EXPECT_GT(q4.mean_kl(), q8.mean_kl());
  EXPECT_GT(kivi.mean_kl(), 0.0);
  EXPECT_GT(mixed.mean_kl(), q8.mean_kl());
  EXPECT_LT(mixed.mean_kl(), q4.mean_kl());
  for (const VariantResult& v : r) {
    EXPECT_EQ(v.sums.n, ref.sums.n);
    EXPECT_LT(v.bytes_per_token, ref.bytes_per_token) << v.variant.name();
  }
  EXPECT_LT(r[1].bytes_per_token, r[0].bytes_per_token);
}

}  // namespace
}  // namespace kvmem::eval
