// Block prefill under a budget (memory/episodic/block_compression.h) against independent
// references on tiny random models: a budget that holds the whole history answers exactly as a
// plain prefill; one block compressed keeps the rows a plain pass's prompt attention ranks
// highest, their K/V copied unchanged; StreamingLLM's recency keeps sinks and the latest rows
// as counted by hand; the pool never holds more than the region and one block.
#include "memory/episodic/block_compression.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>

#include "../model/tiny_model.h"
#include "core/thread_pool.h"
#include "engine/forward.h"
#include "kv/kv_pool.h"
#include "model/model.h"

namespace kvmem::memory {
namespace {

class BlockCompressionTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model::testing::TinyConfig c;
    c.arch = GetParam();
    c.sliding_window = 16;
    file_ = std::make_unique<model::testing::TempFile>(model::testing::BuildTinyGguf(c, 11));
    auto m = model::Model::Load(file_->path());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(16), 256);
    for (int i = 0; i < 300; ++i) tokens_.push_back((i * 29 + 5 + i * i) % model_->spec().n_vocab);
    for (int i = 0; i < 9; ++i) prompt_.push_back((i * 13 + 3) % model_->spec().n_vocab);
  }

  CompressionConfig Config(int64_t rows, RowScore score) const {
    CompressionConfig c;
    c.layer_rows.assign(model_->spec().n_layers, rows);
    c.score = score;
    c.max_batch = 32;
    return c;
  }

  std::span<const int32_t> Tokens(int n) const { return std::span(tokens_).first(n); }

  std::unique_ptr<model::testing::TempFile> file_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvPool> pool_;
  ThreadPool threads_{2};
  std::vector<int32_t> tokens_, prompt_;
};

TEST_P(BlockCompressionTest, BudgetHoldingTheHistoryAnswersAsAPlainPrefill) {
  const int n = 120;
  CompressionConfig config = Config(n, RowScore::kPromptAttention);
  kv::KvSequence seq(pool_.get());
  seq.set_window_release(false);
  auto cache = AllocateRegion(&seq, RegionCapacity(model_->spec(), config));
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(
      BuildCompressedCache(*model_, &threads_, &seq, &*cache, Tokens(n), 0, 40, prompt_, config)
          .ok());
  const std::vector<int32_t> query = {7, 3, 9, 1};
  std::vector<float> got;
  const int64_t tail = seq.n_rows();
  ASSERT_TRUE(PrefillOverCache(*model_, &threads_, &seq, *cache, tail, query, n, 32).ok());
  // The query's logits: its last token once more over what the cache and the query hold.
  seq.Truncate(seq.n_rows() - 1);
  SetView(*cache, &seq, tail);
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &seq, std::span(query).last(1),
                              n + static_cast<int64_t>(query.size()) - 1, false, &got)
                  .ok());

  kv::KvSequence plain(pool_.get());
  std::vector<int32_t> all(tokens_.begin(), tokens_.begin() + n);
  all.insert(all.end(), query.begin(), query.end());
  std::vector<float> want;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &plain, all, 0, false, &want, 32).ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << i;
  // Global layers kept every row; sliding-window layers the rows the next token reads.
  for (int l = 0; l < model_->spec().n_layers; ++l) {
    const int w = model_->spec().layers[l].sliding_window;
    for (int g = 0; g < model_->spec().n_kv_heads; ++g) {
      EXPECT_EQ(static_cast<int>(cache->of(l, g).size()), w > 0 ? w - 1 : n) << l;
    }
  }
}

TEST_P(BlockCompressionTest, OneBlockKeepsTheRowsThePromptAttendsMost) {
  const int n = 64, budget = 20;
  const model::ModelSpec& spec = model_->spec();
  for (HeadBudget heads : {HeadBudget::kUniform, HeadBudget::kPair}) {
    CompressionConfig config = Config(budget, RowScore::kPromptAttention);
    config.heads = heads;
    kv::KvSequence seq(pool_.get());
    seq.set_window_release(false);
    auto cache = AllocateRegion(&seq, RegionCapacity(spec, config));
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(
        BuildCompressedCache(*model_, &threads_, &seq, &*cache, Tokens(n), 0, n, prompt_, config)
            .ok());

    // Reference: a plain sequence of the block, then the prompt with a tap taking, per
    // (layer, KV head) and row, the largest weight over the prompt's tokens and the group.
    kv::KvSequence plain(pool_.get());
    plain.set_window_release(false);
    std::vector<float> unused;
    ASSERT_TRUE(engine::Forward(*model_, &threads_, &plain, Tokens(n), 0, false, &unused, 32).ok());
    const int n_kv = spec.n_kv_heads, group = spec.n_heads / n_kv;
    std::vector<std::vector<double>> best(static_cast<size_t>(spec.n_layers) * n_kv,
                                          std::vector<double>(n, 0.0));
    engine::ForwardPass fp(*model_, &threads_);
    fp.set_tap([&](const engine::TapContext& tap) {
      std::vector<float> w;
      std::vector<kv::RowRef> rows;
      for (int t = 0; t < tap.n_tokens(); ++t) {
        for (int h = 0; h < spec.n_heads; ++h) {
          tap.AttentionWeights(t, h, &w, &rows);
          for (size_t i = 0; i < rows.size(); ++i) {
            const auto it = std::find(plain.blocks().begin(), plain.blocks().end(), rows[i].block);
            if (it == plain.blocks().end()) continue;  // the prompt's own rows
            const int64_t slot = it - plain.blocks().begin();
            const int64_t r = slot * 16 + rows[i].row;
            if (r >= n) continue;
            double& b = best[static_cast<size_t>(tap.layer()) * n_kv + h / group][r];
            b = std::max<double>(b, w[i]);
          }
        }
      }
    });
    engine::Batch b;
    b.tokens = prompt_;
    for (size_t i = 0; i < prompt_.size(); ++i) b.positions.push_back(n + int64_t(i));
    b.persist = false;
    ASSERT_TRUE(fp.Begin(b, &plain).ok());
    while (!fp.done()) fp.StepLayer();

    const auto& g0 = model_->kv_geometry(16);
    std::vector<float> k1(g0.n_kv_heads * g0.head_dim_k), v1(g0.n_kv_heads * g0.head_dim_v);
    std::vector<float> k2(k1.size()), v2(v1.size());
    for (int l = 0; l < spec.n_layers; ++l) {
      if (spec.layers[l].sliding_window > 0) continue;
      // Expected kept positions: per head (uniform) or over the layer (pair), score then recency.
      std::vector<std::vector<int64_t>> want(n_kv);
      std::vector<std::tuple<double, int64_t, int>> all;
      for (int g = 0; g < n_kv; ++g) {
        for (int64_t r = 0; r < n; ++r) {
          all.emplace_back(best[static_cast<size_t>(l) * n_kv + g][r], r, g);
        }
      }
      auto better = [](const auto& a, const auto& b) {
        if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
        if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) > std::get<1>(b);
        return std::get<2>(a) < std::get<2>(b);
      };
      std::sort(all.begin(), all.end(), better);
      std::vector<int> taken(n_kv, 0);
      int total = 0;
      for (const auto& [s, r, g] : all) {
        const bool full =
            heads == HeadBudget::kUniform ? taken[g] >= budget : total >= budget * n_kv;
        if (full) continue;
        want[g].push_back(r);
        ++taken[g];
        ++total;
      }
      for (int g = 0; g < n_kv; ++g) {
        std::sort(want[g].begin(), want[g].end());
        // float weights rank like the double copies unless two are within float rounding; the
        // tiny model's weights are far apart, so the sets agree exactly.
        EXPECT_EQ(cache->of(l, g), want[g]) << "layer " << l << " head " << g;
        for (size_t j = 0; j < want[g].size() && j < cache->of(l, g).size(); ++j) {
          pool_->ReadToken(RowAt(seq, cache->first_row + int64_t(j)), l, k1.data(), v1.data());
          pool_->ReadToken(RowAt(plain, want[g][j]), l, k2.data(), v2.data());
          for (int d = 0; d < g0.head_dim_k; ++d) {
            ASSERT_EQ(k1[g * g0.head_dim_k + d], k2[g * g0.head_dim_k + d]);
          }
          for (int d = 0; d < g0.head_dim_v; ++d) {
            ASSERT_EQ(v1[g * g0.head_dim_v + d], v2[g * g0.head_dim_v + d]);
          }
        }
      }
    }
  }
}

TEST_P(BlockCompressionTest, RecencyKeepsSinksAndTheLatestRows) {
  const int n = 250, budget = 30, sinks = 6;
  CompressionConfig config = Config(budget, RowScore::kRecency);
  config.sinks = sinks;
  kv::KvSequence seq(pool_.get());
  seq.set_window_release(false);
  auto cache = AllocateRegion(&seq, RegionCapacity(model_->spec(), config));
  ASSERT_TRUE(cache.ok());
  const int block = 40;
  ASSERT_TRUE(
      BuildCompressedCache(*model_, &threads_, &seq, &*cache, Tokens(n), 0, block, {}, config)
          .ok());
  std::vector<int64_t> want;
  for (int p = 0; p < sinks; ++p) want.push_back(p);
  for (int p = n - (budget - sinks); p < n; ++p) want.push_back(p);
  for (int l = 0; l < model_->spec().n_layers; ++l) {
    if (model_->spec().layers[l].sliding_window > 0) continue;
    for (int g = 0; g < model_->spec().n_kv_heads; ++g) EXPECT_EQ(cache->of(l, g), want);
  }
  // Peak: the region and one block (block-granular), never the history.
  const int64_t rows = cache->capacity + block;
  const size_t bound = static_cast<size_t>((rows + 15) / 16 + 1) * pool_->bytes_per_block();
  EXPECT_LE(pool_->peak_bytes_in_use(), bound);
  EXPECT_LT(bound, static_cast<size_t>((n + 15) / 16) * pool_->bytes_per_block());
}

// Recency keeps the latest rows contiguously, so re-placing them at compact positions keeps
// every distance the query sees: RoPE's relative rotation predicts the same logits, up to the f16
// rounding of the re-rotated keys.
TEST_P(BlockCompressionTest, ReplacedRowsAnswerAsBefore) {
  const int n = 200, budget = 24;
  CompressionConfig config = Config(budget, RowScore::kRecency);
  kv::KvSequence seq(pool_.get());
  seq.set_window_release(false);
  auto cache = AllocateRegion(&seq, RegionCapacity(model_->spec(), config));
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(
      BuildCompressedCache(*model_, &threads_, &seq, &*cache, Tokens(n), 0, 50, {}, config).ok());
  const std::vector<int32_t> query = {7, 3, 9, 1, 4};
  auto answer = [&](int64_t first_pos) {
    std::vector<float> logits;
    const int64_t tail = seq.n_rows();
    EXPECT_TRUE(
        PrefillOverCache(*model_, &threads_, &seq, *cache, tail, query, first_pos, 32, &logits)
            .ok());
    seq.Truncate(tail);
    return logits;
  };
  const std::vector<float> before = answer(n);
  Replace(*model_, &seq, &*cache);
  EXPECT_EQ(cache->next_pos, cache->capacity);
  const std::vector<float> after = answer(cache->next_pos);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_NEAR(before[i], after[i], 2e-2f) << i;
}

// The history's first rows (StreamingLLM's sinks, the kept system prompt) are told by rank, so
// they survive the compressions after a Replace has moved them off their positions: a history
// built under a max_pos that forces re-placements still holds, in the first slots of every list
// of a global layer, the values of rows 0.. of a plain prefill (values are copied, never
// re-rotated, so they match exactly).
TEST_P(BlockCompressionTest, FirstRowsSurviveReplacements) {
  const int n = 250, budget = 24, block = 40, first = 6;
  const kv::KvGeometry& geo = pool_->geometry();
  kv::KvSequence plain(pool_.get());
  std::vector<float> unused;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &plain, Tokens(first), 0, false, &unused, 32).ok());
  for (RowScore score : {RowScore::kRecency, RowScore::kPromptAttention}) {
    CompressionConfig config = Config(budget, score);
    (score == RowScore::kRecency ? config.sinks : config.keep_first) = first;
    kv::KvSequence seq(pool_.get());
    seq.set_window_release(false);
    // A region larger than the budget (the policy's are whole blocks), so a Replace moves the
    // first rows off positions [0, first).
    auto cache = AllocateRegion(&seq, RegionCapacity(model_->spec(), config) + 20);
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE(BuildCompressedCache(*model_, &threads_, &seq, &*cache, Tokens(n), 0, block,
                                     prompt_, config, /*max_pos=*/cache->capacity + 2 * block)
                    .ok());
    ASSERT_LT(cache->next_pos, n);  // re-placed at least once
    std::vector<float> k(geo.n_kv_heads * geo.head_dim_k), v(geo.n_kv_heads * geo.head_dim_v);
    std::vector<float> k0(k.size()), v0(v.size());
    for (int l = 0; l < model_->spec().n_layers; ++l) {
      if (model_->spec().layers[l].sliding_window > 0) continue;
      for (int j = 0; j < first; ++j) {
        pool_->ReadToken(RowAt(seq, cache->first_row + j), l, k.data(), v.data());
        pool_->ReadToken(RowAt(plain, j), l, k0.data(), v0.data());
        EXPECT_EQ(v, v0) << "score " << static_cast<int>(score) << " layer " << l << " row " << j;
      }
    }
  }
}

TEST(CompressedCachePositions, RoundTripAndHostileInput) {
  CompressedCache c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.capacity = 5;
  c.next_pos = 1000;
  c.pos = {{0, 1, 2}, {5, 999}, {}, {3, 200, 300, 301, 998}};
  const std::string text = EncodePositions(c);
  CompressedCache d = c;
  d.pos.clear();
  ASSERT_TRUE(DecodePositions(text, &d).ok());
  EXPECT_EQ(d.pos, c.pos);
  CompressedCache small = c;
  small.next_pos = 999;  // position 999 lies beyond
  EXPECT_FALSE(DecodePositions(text, &small).ok());
  CompressedCache narrow = c;
  narrow.capacity = 4;
  EXPECT_FALSE(DecodePositions(text, &narrow).ok());
  EXPECT_FALSE(DecodePositions("not base64!", &d).ok());
  EXPECT_FALSE(DecodePositions(text.substr(0, text.size() - 4), &d).ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, BlockCompressionTest, ::testing::Values("llama", "gemma3"));

}  // namespace
}  // namespace kvmem::memory
