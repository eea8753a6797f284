// Sentence embeddings against sentence-transformers (torch, float32; goldens from
// scripts/make_embed_goldens.py): a tiny random-weight BERT that is always present and the
// installed all-MiniLM-L6-v2 when there is one; plus properties the goldens do not pin down.
#include "memory/embed/sentence_encoder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "embed_test_util.h"

namespace kvmem::memory::embed {
namespace {

using testing::Cosine;
using testing::LoadF32;
using testing::LoadJson;

struct Golden {
  std::vector<std::string> texts;
  std::vector<float> embeddings;  // (texts, dim)
  int dim = 0;
};

Golden LoadGolden(const std::string& stem) {
  Golden g;
  const nlohmann::json j = LoadJson(stem + ".json");
  g.dim = j["dim"].get<int>();
  for (const auto& c : j["cases"]) g.texts.push_back(c["text"].get<std::string>());
  g.embeddings = LoadF32(stem + ".f32");
  EXPECT_EQ(g.embeddings.size(), g.texts.size() * static_cast<size_t>(g.dim));
  return g;
}

// Per sentence: cosine to the reference >= min_cos, unit norm, max |difference| <= max_abs.
void ExpectMatches(const SentenceEncoder& enc, const Golden& g, ThreadPool* pool, double min_cos,
                   double max_abs) {
  ASSERT_EQ(enc.dim(), g.dim);
  const std::vector<float> got = enc.Embed(g.texts, pool);
  ASSERT_EQ(got.size(), g.embeddings.size());
  double worst_cos = 1, worst_abs = 0;
  for (size_t i = 0; i < g.texts.size(); ++i) {
    const float* a = got.data() + i * g.dim;
    const float* b = g.embeddings.data() + i * g.dim;
    const double cos = Cosine(a, b, g.dim);
    double norm2 = 0, max_diff = 0;
    for (int k = 0; k < g.dim; ++k) {
      norm2 += static_cast<double>(a[k]) * a[k];
      max_diff = std::max(max_diff, std::abs(static_cast<double>(a[k]) - b[k]));
    }
    EXPECT_GE(cos, min_cos) << "sentence " << i << ": " << g.texts[i].substr(0, 60);
    EXPECT_LE(max_diff, max_abs) << "sentence " << i << ": " << g.texts[i].substr(0, 60);
    EXPECT_NEAR(norm2, 1.0, 1e-5) << "sentence " << i;
    worst_cos = std::min(worst_cos, cos);
    worst_abs = std::max(worst_abs, max_diff);
  }
  std::printf("  %zu sentences: worst cosine 1 - %.2e, worst |diff| %.2e\n", g.texts.size(),
              1 - worst_cos, worst_abs);
}

TEST(SentenceEncoderTest, TinyModelMatchesSentenceTransformers) {
  auto enc = SentenceEncoder::Load(testing::TinyModelDir());
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->dim(), 32);
  EXPECT_EQ(enc->max_seq_length(), 16);  // the last golden sentence is cut to 16 tokens
  const Golden g = LoadGolden("tiny_embed");
  ExpectMatches(*enc, g, nullptr, 0.99999, 1e-4);
  ThreadPool pool(2);
  ExpectMatches(*enc, g, &pool, 0.99999, 1e-4);
}

// Loading model.safetensors by its path reads the other files beside it.
TEST(SentenceEncoderTest, LoadsFromWeightsPath) {
  auto enc = SentenceEncoder::Load(testing::TinyModelDir() + "/model.safetensors");
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(enc->dim(), 32);
}

TEST(SentenceEncoderTest, MiniLmMatchesSentenceTransformers) {
  KVMEM_REQUIRE_MINILM(enc);
  EXPECT_EQ(enc->dim(), 384);
  EXPECT_EQ(enc->max_seq_length(), 256);
  ThreadPool pool(2);
  ExpectMatches(*enc, LoadGolden("minilm_embed"), &pool, 0.9999, 2e-4);
}

// A sentence's embedding does not depend on its batch, the chunking or the thread count.
TEST(SentenceEncoderTest, MiniLmBatchAndThreadInvariant) {
  KVMEM_REQUIRE_MINILM(enc);
  const Golden g = LoadGolden("minilm_embed");
  ThreadPool pool(2);
  const std::vector<float> batch = enc->Embed(g.texts, &pool);
  for (size_t i : {size_t{2}, size_t{5}, g.texts.size() - 1}) {
    const std::vector<float> one = enc->Embed(std::span(&g.texts[i], 1), nullptr);
    EXPECT_GE(Cosine(one.data(), batch.data() + i * enc->dim(), enc->dim()), 1 - 1e-6) << i;
  }
}

// Paraphrases are closer than unrelated sentences.
TEST(SentenceEncoderTest, MiniLmParaphrasesAreCloser) {
  KVMEM_REQUIRE_MINILM(enc);
  const std::vector<std::string> texts = {
      "A man is eating food.",
      "A man is eating a piece of bread.",
      "A monkey is playing drums.",
      "The cat sat on the mat.",
      "A cat was sitting on a rug.",
      "Stock markets fell sharply after the announcement.",
      "When did Caroline go to the support group?",
      "Caroline: I went to the LGBTQ support group yesterday and it was so powerful."};
  const std::vector<float> e = enc->Embed(texts, nullptr);
  const int d = enc->dim();
  auto cos = [&](int a, int b) { return Cosine(e.data() + a * d, e.data() + b * d, d); };
  EXPECT_GT(cos(0, 1), cos(0, 2));
  EXPECT_GT(cos(0, 1), cos(0, 5));
  EXPECT_GT(cos(3, 4), cos(3, 0));
  EXPECT_GT(cos(3, 4), cos(3, 5));
  EXPECT_GT(cos(3, 4), 0.5);
  // The question retrieves its evidence turn before unrelated ones.
  for (int other : {0, 2, 3, 5}) EXPECT_GT(cos(6, 7), cos(6, other)) << other;
}

// Not a test: the speed the brief asks for. Run with --gtest_also_run_disabled_tests.
TEST(SentenceEncoderTest, DISABLED_MiniLmSpeed) {
  KVMEM_REQUIRE_MINILM(enc);
  const std::vector<std::string> base = {
      "A man is eating food.", "The cat sat on the mat.", "When did Caroline go to the group?",
      "Melanie: That's awesome! What happened at the meeting?", "I love painting sunsets."};
  std::vector<std::string> texts;
  for (int i = 0; i < 100; ++i) texts.push_back(base[i % base.size()] + " #" + std::to_string(i));
  size_t tokens = 0;
  for (const auto& t : texts) tokens += enc->Tokenize(t).size();
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    enc->Embed(texts, &pool);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 3;
    for (int r = 0; r < reps; ++r) enc->Embed(texts, &pool);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("  %d thread(s): 100 sentences (%zu tokens) in %.3f s: %.0f sentences/s\n", threads,
                tokens, s, 100 / s);
  }
}

}  // namespace
}  // namespace kvmem::memory::embed
