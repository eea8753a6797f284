// MemArt's whole-turn reading (MemArtConfig::whole_turns) on tiny random models: the rows read
// equal those an independent greedy pass over the turns gives from layer 0's block scores
// computed directly in double precision (memart_test_util.h), every layer reads them, and the
// working rows hold them re-encoded.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "memart_test_util.h"
#include "memory/retrieval/memart.h"

namespace kvmem::memory {
namespace {

using testing::DirectLayer0Scores;
using testing::ExpectWorkingRows;
using testing::Layer0Queries;

class MemArtWholeTurnsTest : public testing::MemArtFixture {};

// The history's turns, not aligned to the blocks of 8 rows; one of 37 rows.
const std::vector<RowSpan> kTurns = {{0, 20}, {20, 45}, {45, 53}, {53, 90}, {90, 100}, {100, 128}};

// What whole_turns should read: block 0 (kept), then in score order each candidate block's
// turns (all those it overlaps), or the block alone when they are longer than the budget, as
// long as their unread rows fit in what is left of it.
std::vector<RowSpan> WantRows(const std::vector<double>& score, int64_t budget) {
  std::vector<bool> read(128, false);
  std::fill(read.begin(), read.begin() + 8, true);
  std::vector<int64_t> order;
  for (int64_t b = 1; b < 16; ++b) order.push_back(b);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  int64_t left = budget;
  for (int64_t b : order) {
    RowSpan take{128, 0};
    for (const RowSpan& t : kTurns) {
      if (t.begin < (b + 1) * 8 && t.end > b * 8) {
        take.begin = std::min(take.begin, t.begin);
        take.end = std::max(take.end, t.end);
      }
    }
    if (take.end - take.begin > budget) take = {b * 8, (b + 1) * 8};
    int64_t fresh = 0;
    for (int64_t r = take.begin; r < take.end; ++r) fresh += read[r] ? 0 : 1;
    if (fresh > left) continue;
    for (int64_t r = take.begin; r < take.end; ++r) read[r] = true;
    left -= fresh;
  }
  std::vector<RowSpan> spans;
  for (int64_t r = 0; r < 128; ++r) {
    if (!read[r]) continue;
    if (!spans.empty() && spans.back().end == r) {
      ++spans.back().end;
    } else {
      spans.push_back({r, r + 1});
    }
  }
  return spans;
}

TEST_P(MemArtWholeTurnsTest, ReadsTheWholeTurnsOfTheBestBlocks) {
  for (const int top_k : {3, 6}) {  // 24 rows: the 37-row turn cannot fit; 48: it can
    SCOPED_TRACE("top_k " + std::to_string(top_k));
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(32), 64);
    MemArtConfig config;
    config.block_size = 8;
    config.top_k = top_k;
    config.keep_first = 8;
    config.retrieval_heads = {{0, 1}};
    config.strategy.block_score = BlockScore::kExact;
    config.whole_turns = true;
    auto mem = Make(config);
    ASSERT_TRUE(mem->BeginTurn(Tokens(0, 128), &threads_, nullptr).ok());
    std::vector<int64_t> offsets;
    for (const RowSpan& t : kTurns) offsets.push_back(t.begin);
    ASSERT_TRUE(mem->EndTurn(true, offsets).ok());

    // The first pass runs the query after the block budget's rows (8 kept + top_k * 8).
    const int q0 = 128, q1 = 140;
    const int64_t pass1_rows = 8 + top_k * 8;
    const std::vector<float> q =
        Layer0Queries(*model_, &threads_, pool_.get(), Tokens(q0, q1), pass1_rows);
    const std::vector<double> score = DirectLayer0Scores(*model_, *pool_, *mem, q, pass1_rows, 0,
                                                         q1 - q0, 8, BlockScore::kExact, 1);
    const std::vector<RowSpan> want = WantRows(score, top_k * 8);
    int64_t want_rows = 0;
    for (const RowSpan& s : want) want_rows += s.end - s.begin;
    EXPECT_LE(want_rows, pass1_rows);

    RetrievalReport rep;
    ASSERT_TRUE(mem->BeginTurn(Tokens(q0, q1), &threads_, &rep).ok());
    EXPECT_EQ(rep.retrieved_rows, want_rows);
    EXPECT_EQ(mem->next_position(), want_rows + (q1 - q0));
    EXPECT_EQ(rep.RowsRead(), want);
    for (int l = 0; l < model_->spec().n_layers; ++l) {
      EXPECT_EQ(rep.rows[l], want) << "layer " << l;
      ExpectWorkingRows(*model_, *pool_, *mem, l, want);
    }
    // Blocks are those the rows touch.
    std::vector<int64_t> touched;
    for (const RowSpan& s : want) {
      for (int64_t b = s.begin / 8; b <= (s.end - 1) / 8; ++b) {
        if (touched.empty() || touched.back() < b) touched.push_back(b);
      }
    }
    EXPECT_EQ(rep.blocks[0], touched);
    // The turn joins the history behind R rows of any length.
    ASSERT_TRUE(mem->EndTurn(true).ok());
    EXPECT_EQ(mem->history_rows(), 140);
    EXPECT_EQ(mem->turn_starts().back(), 128);
  }
}

TEST_P(MemArtWholeTurnsTest, NeedsRetrievalHeadsAndNoNeighbours) {
  MemArtConfig config;
  config.whole_turns = true;
  EXPECT_EQ(ValidateMemArtConfig(config).code(), ErrorCode::kInvalidArgument);
  config.retrieval_heads = {{0, 1}};
  EXPECT_TRUE(ValidateMemArtConfig(config).ok());
  config.neighbors = 1;
  EXPECT_EQ(ValidateMemArtConfig(config).code(), ErrorCode::kInvalidArgument);
  config.neighbors = 0;
  auto mem = Make({});
  EXPECT_EQ(mem->Reconfigure(config).ok(), true);
}

INSTANTIATE_TEST_SUITE_P(Archs, MemArtWholeTurnsTest, ::testing::Values("llama", "gemma3"));

}  // namespace
}  // namespace kvmem::memory
