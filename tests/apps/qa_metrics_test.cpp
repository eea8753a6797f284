// QA metrics and BM25 (apps/eval/qa_metrics.h, bm25.h) against values computed by hand.
#include "eval/qa_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "eval/bm25.h"

namespace kvmem::eval {
namespace {

TEST(QaMetrics, Normalization) {
  EXPECT_EQ(NormalizedTokens("The  Cat's hat, a RED one!"),
            (std::vector<std::string>{"cats", "hat", "red", "one"}));
  EXPECT_TRUE(NormalizedTokens(" ... the a an ").empty());
  EXPECT_EQ(NormalizedTokens("7 May 2023"), (std::vector<std::string>{"7", "may", "2023"}));
}

TEST(QaMetrics, TokenF1) {
  // pred {7, may, 2023}, gold {7, may}: P = 2/3, R = 1, F1 = 0.8.
  EXPECT_NEAR(TokenF1("on 7 May 2023", "7 May"), 2 * (2.0 / 4) * 1.0 / (2.0 / 4 + 1.0), 1e-12);
  EXPECT_NEAR(TokenF1("7 May 2023", "7 May"), 0.8, 1e-12);
  EXPECT_EQ(TokenF1("The answer.", "answer"), 1.0);
  EXPECT_EQ(TokenF1("", ""), 1.0);
  EXPECT_EQ(TokenF1("x", ""), 0.0);
  EXPECT_EQ(TokenF1("dog", "cat"), 0.0);
  // Multiplicity: pred {a, a} vs gold {a}... with a real word: {dog, dog} vs {dog}: P 1/2, R 1.
  EXPECT_NEAR(TokenF1("dog dog", "dog"), 2 * 0.5 / 1.5, 1e-12);
}

TEST(QaMetrics, Bleu1) {
  EXPECT_NEAR(Bleu1("7 May 2023", "7 May"), 2.0 / 3, 1e-12);  // no brevity penalty
  // Shorter than gold: precision 1, BP = exp(1 - 3/1).
  EXPECT_NEAR(Bleu1("may", "7 may 2023"), std::exp(1.0 - 3.0), 1e-12);
  EXPECT_EQ(Bleu1("", "x"), 0.0);
  EXPECT_NEAR(Bleu1("dog dog", "dog"), 0.5, 1e-12);  // clipped
}

TEST(Bm25, HandComputedScores) {
  const std::vector<std::string> docs = {"the cat sat", "dog dog bark", "cat and dog"};
  // Terms: {cat, sat}, {dog, dog, bark}, {cat, and, dog}: avgdl = 8/3.
  const Bm25Index index(docs, 1.2, 0.75);
  const double n = 3, avgdl = 8.0 / 3;
  auto idf = [&](double df) { return std::log(1 + (n - df + 0.5) / (df + 0.5)); };
  auto term = [&](double f, double len) {
    return f * 2.2 / (f + 1.2 * (1 - 0.75 + 0.75 * len / avgdl));
  };
  EXPECT_NEAR(index.Score("dog", 1), idf(2) * term(2, 3), 1e-12);
  EXPECT_NEAR(index.Score("cat dog", 2), idf(2) * term(1, 3) * 2, 1e-12);
  EXPECT_NEAR(index.Score("cat", 0), idf(2) * term(1, 2), 1e-12);
  EXPECT_EQ(index.Score("fish", 0), 0.0);
  EXPECT_EQ(index.TopK("bark", 1), (std::vector<size_t>{1}));
  // "cat": docs 0 (shorter) then 2; doc 1 scores 0 and comes last.
  EXPECT_EQ(index.TopK("cat", 3), (std::vector<size_t>{0, 2, 1}));
  EXPECT_EQ(index.TopK("cat", 10).size(), 3u);
}

}  // namespace
}  // namespace kvmem::eval
