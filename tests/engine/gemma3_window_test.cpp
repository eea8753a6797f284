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
#include "engine/memory_budget.h"
#include "kv/kv_format.h"

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
  void Load(int n_layers, int head_dim = 8) {
    TinyConfig c;
    c.arch = "gemma3";
    c.n_layers = n_layers;
    c.head_dim = head_dim;
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

// Bounded memory: after each persistent pass the local layers give back whole blocks their
// window can no longer reach. The logits of every step are bit-identical to a sequence that keeps
// everything, and the pool holds exactly the blocks the window rule says it needs.
TEST_F(Gemma3WindowTest, ReleasedWindowRowsChangeNothingAndBoundMemory) {
  Load(6);
  constexpr int kRows = 4, kTokens = 41;
  std::vector<int32_t> tokens(kTokens);
  for (int i = 0; i < kTokens; ++i) tokens[i] = (i * 37 + 11) % 64;
  kv::KvPool kept_pool(model_->kv_geometry(kRows), 64), released_pool(model_->kv_geometry(kRows), 64);
  kv::KvSequence kept(&kept_pool), released(&released_pool);
  kept.set_window_release(false);
  ASSERT_TRUE(released.window_release());  // the default
  std::vector<float> a, b;
  // A prefill in micro-batches of 8, then one-token decode steps.
  const auto all = std::span(tokens);
  ASSERT_TRUE(Forward(*model_, &threads_, &kept, all.first(24), 0, true, &a, 8).ok());
  ASSERT_TRUE(Forward(*model_, &threads_, &released, all.first(24), 0, true, &b, 8).ok());
  EXPECT_EQ(MaxDiff(a, b), 0.0f);
  for (int i = 24; i < kTokens; ++i) {
    ASSERT_TRUE(Forward(*model_, &threads_, &kept, all.subspan(i, 1), i, false, &a).ok());
    ASSERT_TRUE(Forward(*model_, &threads_, &released, all.subspan(i, 1), i, false, &b).ok());
    ASSERT_EQ(MaxDiff(a, b), 0.0f) << "step " << i;
  }
  // Blocks of 4 rows: 11 in use (41 rows). The next token (position 41) reads local rows at
  // positions > 41 - kWindow = 37, so local layers need only blocks 9 (36..39) and 10 (40).
  const size_t layer = released_pool.layer_bytes();
  EXPECT_EQ(kept_pool.bytes_in_use(), 11 * 6 * layer);
  EXPECT_EQ(released_pool.bytes_in_use(), (11 * 1 + 2 * 5) * layer);
  for (int l = 0; l < 5; ++l) {
    EXPECT_EQ(released.released_through(l), 35);  // the last row of block 8
    EXPECT_FALSE(released_pool.has_layer(released.blocks()[8], l));
    EXPECT_TRUE(released_pool.has_layer(released.blocks()[9], l));
  }
  EXPECT_EQ(released.released_through(5), kv::kNoPosition);  // the global layer keeps everything

  // A token that would need released rows is refused with a clear error; nothing changes.
  const int32_t one[] = {3};
  Status s = Forward(*model_, &threads_, &released, one, 20, false, &b);
  EXPECT_EQ(s.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("sliding-window layer"), std::string::npos) << s.message();
  EXPECT_EQ(released.n_rows(), kTokens);
  // Continuing at the next position still agrees.
  ASSERT_TRUE(Forward(*model_, &threads_, &kept, one, kTokens, false, &a).ok());
  ASSERT_TRUE(Forward(*model_, &threads_, &released, one, kTokens, false, &b).ok());
  EXPECT_EQ(MaxDiff(a, b), 0.0f);
}

// The saving is per format: released local layers free their quantized storage too.
TEST_F(Gemma3WindowTest, ReleaseWorksForEveryKvFormat) {
  Load(6, /*head_dim=*/32);  // quantized KV rows are 32-value blocks
  for (kv::KvFormat f : {kv::KvFormat::kQ8_0, kv::KvFormat::kQ4_0, kv::KvFormat::kKivi4}) {
    // kivi4 groups are 32 rows: blocks of 32.
    kv::KvPool pool(model_->kv_geometry(32), 8, {f, f});
    kv::KvSequence seq(&pool);
    std::vector<int32_t> tokens(70);
    for (int i = 0; i < 70; ++i) tokens[i] = (i * 13 + 5) % 64;
    std::vector<float> logits;
    ASSERT_TRUE(Forward(*model_, &threads_, &seq, tokens, 0, false, &logits, 16).ok());
    // Next position 70 reads local rows > 66: blocks 0 (0..31) and 1 (32..63) are released.
    EXPECT_EQ(pool.bytes_in_use(), (3 * 6 - 2 * 5) * pool.layer_bytes()) << kv::KvFormatName(f);
    const int32_t one[] = {9};
    EXPECT_TRUE(Forward(*model_, &threads_, &seq, one, 70, false, &logits).ok());
  }
}

// The KV budget `kvmem run` prints is computed from the geometry; it must equal what the pool
// actually held at its peak, for prefill in micro-batches and decode, with and without release.
TEST_F(Gemma3WindowTest, ComputedKvBudgetEqualsPoolPeak) {
  Load(6);
  struct Case {
    int rows, prompt, decode, batch;
  };
  for (const Case c : {Case{4, 30, 5, 8}, Case{4, 9, 12, 3}, Case{8, 40, 1, 16}, Case{4, 3, 20, 8}}) {
    for (bool release : {true, false}) {
      kv::KvPool pool(model_->kv_geometry(c.rows), 64);
      kv::KvSequence seq(&pool);
      seq.set_window_release(release);
      std::vector<int32_t> tokens(c.prompt + c.decode);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 64);
      std::vector<float> logits;
      const auto all = std::span(tokens);
      ASSERT_TRUE(
          Forward(*model_, &threads_, &seq, all.first(c.prompt), 0, false, &logits, c.batch).ok());
      for (int i = c.prompt; i < c.prompt + c.decode; ++i) {
        ASSERT_TRUE(Forward(*model_, &threads_, &seq, all.subspan(i, 1), i, false, &logits).ok());
      }
      EXPECT_EQ(PeakKvBytes(model_->spec(), pool, c.prompt, c.decode, c.batch, release),
                pool.peak_bytes_in_use())
          << "rows " << c.rows << " prompt " << c.prompt << " decode " << c.decode << " batch "
          << c.batch << " release " << release;
    }
  }
}

}  // namespace
}  // namespace kvmem::engine
