// Sliding-window attention as a property of the forward pass, on tiny random Gemma-3 models: in
// a local layer, rows at positions <= p - W are out of reach of a token at p, so hiding them
// from the view changes nothing; in a global layer they are read, so hiding them changes the
// logits. (Which rows CollectVisible names is tests/model/sliding_window_test.cpp; the numbers
// against an independent implementation are tests/oracle/test_forward.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../model/tiny_model.h"
#include "engine/forward.h"

namespace kvmem::engine {
namespace {

using model::testing::BuildTinyGguf;
using model::testing::TempFile;
using model::testing::TinyConfig;

constexpr int kWindow = 4;
constexpr int kPrefix = 13;  // the decoded token sits at position kPrefix

class Gemma3WindowTest : public ::testing::Test {
 protected:
  // n_layers 5: all local; 6: layer 5 global (every 6th layer).
  void Load(int n_layers) {
    TinyConfig c;
    c.arch = "gemma3";
    c.n_layers = n_layers;
    c.sliding_window = kWindow;
    c.rope_base = 1e6f;
    file_ = std::make_unique<TempFile>(BuildTinyGguf(c, 5));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    // Blocks of 4 rows, so the prefix spans several blocks and runs.
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(4), 16);
  }

  // Logits of the token after the prefix, after `hide` edits the prefix's view.
  template <typename Hide>
  std::vector<float> DecodeAfter(Hide hide) {
    kv::KvSequence seq(pool_.get());
    std::vector<float> logits;
    EXPECT_TRUE(
        Forward(*model_, &threads_, &seq, std::span(tokens_).first(kPrefix), 0, false, &logits)
            .ok());
    hide(seq);
    const int32_t next[] = {tokens_[kPrefix]};
    EXPECT_TRUE(Forward(*model_, &threads_, &seq, next, kPrefix, false, &logits).ok());
    return logits;
  }

  // Hides the prefix rows at positions [lo, hi] in `layer` (-1: all layers).
  static void HidePositions(kv::KvSequence& seq, int64_t lo, int64_t hi, int layer) {
    const int block_rows = seq.pool()->geometry().block_rows;
    for (int64_t p = lo; p <= hi; ++p) {
      seq.view().Hide({seq.blocks()[p / block_rows], static_cast<int32_t>(p % block_rows)}, 1,
                      layer);
    }
  }

  static float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  }

  std::unique_ptr<TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  const std::vector<int32_t> tokens_ = {1, 5, 9, 33, 2, 60, 17, 17, 40, 8, 3, 12, 50, 7};
};

TEST_F(Gemma3WindowTest, AllLocalLayersIgnoreRowsOutsideTheWindow) {
  Load(5);
  for (const auto& l : model_->spec().layers) ASSERT_EQ(l.sliding_window, kWindow);
  const std::vector<float> full = DecodeAfter([](kv::KvSequence&) {});
  // The token at kPrefix reads positions kPrefix - kWindow + 1 .. kPrefix: the rest can go.
  const std::vector<float> hidden = DecodeAfter(
      [](kv::KvSequence& seq) { HidePositions(seq, 0, kPrefix - kWindow, /*layer=*/-1); });
  EXPECT_EQ(MaxDiff(full, hidden), 0.0f);  // the same rows, bit for bit
  // The oldest row inside the window does count.
  const std::vector<float> inside = DecodeAfter([](kv::KvSequence& seq) {
    HidePositions(seq, kPrefix - kWindow + 1, kPrefix - kWindow + 1, -1);
  });
  EXPECT_GT(MaxDiff(full, inside), 1e-3f);
}

TEST_F(Gemma3WindowTest, GlobalLayerReadsRowsOutsideTheWindow) {
  Load(6);
  ASSERT_EQ(model_->spec().layers[5].sliding_window, 0);
  const std::vector<float> full = DecodeAfter([](kv::KvSequence&) {});
  // Out of the window in the local layers only: nothing changes.
  const std::vector<float> local_hidden = DecodeAfter([](kv::KvSequence& seq) {
    for (int l = 0; l < 5; ++l) HidePositions(seq, 0, kPrefix - kWindow, l);
  });
  EXPECT_EQ(MaxDiff(full, local_hidden), 0.0f);
  // Hidden from the global layer too: its attention changes, and with it the logits.
  const std::vector<float> all_hidden = DecodeAfter(
      [](kv::KvSequence& seq) { HidePositions(seq, 0, kPrefix - kWindow, /*layer=*/-1); });
  EXPECT_GT(MaxDiff(full, all_hidden), 1e-3f);
}

// A batch (prefill) obeys the same window as one-token decoding: each batch token reads only the
// last kWindow positions of the local layers, including earlier tokens of its own batch.
TEST_F(Gemma3WindowTest, PrefillEqualsDecodeUnderTheWindow) {
  Load(6);
  const auto all = std::span(tokens_);
  kv::KvSequence batch_seq(pool_.get());
  std::vector<float> batch;
  ASSERT_TRUE(Forward(*model_, &threads_, &batch_seq, all, 0, /*all_logits=*/true, &batch).ok());
  kv::KvSequence step_seq(pool_.get());
  std::vector<float> steps, one;
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_TRUE(Forward(*model_, &threads_, &step_seq, all.subspan(i, 1), static_cast<int64_t>(i),
                        false, &one)
                    .ok());
    steps.insert(steps.end(), one.begin(), one.end());
  }
  EXPECT_LT(MaxDiff(batch, steps), 1e-4f);
}

}  // namespace
}  // namespace kvmem::engine
