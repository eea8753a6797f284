// MemArt's turn loop (memory/retrieval/memart.h) on tiny random models (llama and gemma3, F32
// weights, f16 KV), each property against a reference computed another way:
//   - with top_k covering every block, decoupled positions are the original ones, so a query
//     after two remembered turns gives the logits of one plain pass over all the tokens;
//   - layer 0's retrieved blocks equal a double-precision re-implementation of Eq. 2-4 (boxes
//     from the history's keys un-rotated directly, softmax-sum, top-k) on layer 0's queries
//     (which retrieval cannot influence), and likewise with the exact max q . k per block, and
//     with one retrieval head of layer 0 choosing for every layer, and with the best block
//     bringing its neighbours;
//   - every working row holds its history row's key rotated to the new position (checked
//     against a direct double-precision rotation) and the same value;
//   - coupled positions put the rows at their original positions and the query after the
//     history; EndTurn(keep=false) leaves the history alone.
#include "memory/retrieval/memart.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/fp16.h"
#include "engine/forward.h"
#include "memart_test_util.h"

namespace kvmem::memory {
namespace {

using testing::DirectLayer0Scores;
using testing::ExpectWorkingRows;
using testing::Layer0Queries;

class MemArtTest : public testing::MemArtFixture {
 protected:
  void CheckLayer0Selection(BlockScore block_score, int retrieval_head = -1, int neighbors = 0,
                            bool one_block_turns = false, tokenizer::TokenSpan scoring = {});
  void CheckAllBlocksEqualFullContext(bool retrieval_heads, bool whole_turns);
};

TEST_P(MemArtTest, AllBlocksRetrievedEqualsFullContext) {
  for (const auto& [heads, whole_turns] :
       {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
    SCOPED_TRACE(whole_turns ? "whole turns"
                 : heads     ? "retrieval heads (two passes)"
                             : "per-layer choice");
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(32), 64);
    CheckAllBlocksEqualFullContext(heads, whole_turns);
  }
}

void MemArtTest::CheckAllBlocksEqualFullContext(bool retrieval_heads, bool whole_turns) {
  MemArtConfig config;
  config.block_size = 8;
  config.top_k = 1000;
  if (retrieval_heads) config.retrieval_heads = {{1, 0}};
  config.whole_turns = whole_turns;
  auto mem = Make(config);
  Remember(mem.get(), 0, 70);
  Remember(mem.get(), 70, 131);  // 131 rows: the last block is partial
  EXPECT_EQ(mem->history_rows(), 131);
  EXPECT_EQ(mem->n_blocks(), 17);
  RetrievalReport rep;
  ASSERT_TRUE(mem->BeginTurn(Tokens(131, 150), &threads_, &rep).ok());
  EXPECT_EQ(rep.retrieved_rows, 131);
  EXPECT_EQ(rep.query_tokens, 19);
  ASSERT_EQ(mem->next_position(), 150);
  std::vector<float> got;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, mem->working(), Tokens(150, 151),
                              mem->next_position(), false, &got)
                  .ok());
  ASSERT_TRUE(mem->EndTurn(false).ok());
  EXPECT_EQ(mem->history_rows(), 131);

  kv::KvSequence plain(pool_.get());
  std::vector<float> want;
  ASSERT_TRUE(engine::Forward(*model_, &threads_, &plain, Tokens(0, 151), 0, false, &want).ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "logit " << i;
  }
}

// Layer 0's choice against Eq. 2-4 computed directly (kUpperBound), or with Eq. 3 replaced by the
// exact maximum of q . k over each block's keys (kExact). With retrieval_head >= 0, that query
// head of layer 0 alone chooses (MemArtConfig::retrieval_heads), and every layer reads its set.
// With neighbors = 1, the best block and the two beside it are the 3 retrieved. With
// one_block_turns, every block is a turn of its own and neighbours are turn-bounded: the plain
// top 3 again. `scoring`: the query tokens (of 12) whose rows score.
void MemArtTest::CheckLayer0Selection(BlockScore block_score, int retrieval_head, int neighbors,
                                      bool one_block_turns, tokenizer::TokenSpan scoring) {
  const model::ModelSpec& s = model_->spec();
  MemArtConfig config;
  config.strategy.block_score = block_score;
  if (retrieval_head >= 0) config.retrieval_heads = {{0, retrieval_head}};
  config.neighbors = neighbors;
  config.turn_bounded = one_block_turns;
  config.block_size = 8;
  config.top_k = 3;
  config.keep_first = 8;  // block 0
  config.keep_last = 8;   // block 15 (128 rows: no partial block)
  auto mem = Make(config);
  if (one_block_turns) {
    std::vector<int64_t> offsets;
    for (int64_t b = 0; b < 16; ++b) offsets.push_back(b * 8);
    ASSERT_TRUE(mem->BeginTurn(Tokens(0, 128), &threads_, nullptr).ok());
    ASSERT_TRUE(mem->EndTurn(true, offsets).ok());
    ASSERT_EQ(mem->turn_starts(), offsets);
  } else {
    Remember(mem.get(), 0, 60);
    Remember(mem.get(), 60, 128);
  }
  const int64_t n_blocks = mem->n_blocks();
  ASSERT_EQ(n_blocks, 16);

  // Layer 0's queries of the query tokens at their positions (R = 5 blocks of 8 = 40..), and
  // the blocks' scores computed from them directly.
  const int q0 = 128, q1 = 140;
  const int64_t r_rows = 40;
  const std::vector<float> q =
      Layer0Queries(*model_, &threads_, pool_.get(), Tokens(q0, q1), r_rows);
  ASSERT_EQ(q.size(), static_cast<size_t>((q1 - q0) * s.q_dim()));
  const int64_t t_end = scoring.end < 0 ? q1 - q0 : scoring.end;
  const std::vector<double> score = DirectLayer0Scores(*model_, *pool_, *mem, q, r_rows,
                                                       scoring.begin, t_end, 8, block_score,
                                                       retrieval_head);
  std::vector<int64_t> cand;
  for (int64_t b = 1; b < 15; ++b) cand.push_back(b);
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  // The kernel scores with f16 boxes and q rounded to f16: a choice between candidates whose
  // exact scores differ by less than that rounding may go either way, anything else may not.
  const double tol = 5e-3 * score[cand[0]];

  RetrievalReport rep;
  ASSERT_TRUE(mem->BeginTurn(Tokens(q0, q1), &threads_, &rep, scoring).ok());
  EXPECT_EQ(rep.retrieved_rows, r_rows);
  const std::vector<int64_t>& got = rep.blocks[0];
  ASSERT_EQ(got.size(), 5u);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(got.front(), 0);  // always kept
  EXPECT_EQ(got.back(), 15);
  if (neighbors == 1 && !one_block_turns) {
    // Among the 3 retrieved candidates is a best one by the direct scores (up to the kernel's
    // rounding), with those of its two neighbours that are candidates (1..14).
    const std::vector<int64_t> run(got.begin() + 1, got.end() - 1);
    const int64_t a = *std::max_element(run.begin(), run.end(),
                                        [&](int64_t x, int64_t y) { return score[x] < score[y]; });
    EXPECT_GE(score[a], score[cand[0]] - tol) << "block " << a << " is not a best block";
    for (const int64_t b : {a - 1, a + 1}) {
      if (b >= 1 && b <= 14) {
        EXPECT_TRUE(std::find(run.begin(), run.end(), b) != run.end()) << "neighbour " << b;
      }
    }
  } else {
    double worst_chosen = INFINITY, best_left = -INFINITY;
    for (int64_t b : cand) {
      const bool chosen = std::find(got.begin(), got.end(), b) != got.end();
      (chosen ? worst_chosen : best_left) =
          chosen ? std::min(worst_chosen, score[b]) : std::max(best_left, score[b]);
    }
    EXPECT_GE(worst_chosen, best_left - tol);
    if (score[cand[2]] - score[cand[3]] > tol) {
      std::vector<int64_t> want = {0, 15, cand[0], cand[1], cand[2]};
      std::sort(want.begin(), want.end());
      EXPECT_EQ(got, want);
    }
  }
  for (const auto& layer : rep.blocks) EXPECT_EQ(layer.size(), 5u);
  if (retrieval_head >= 0) {
    for (const auto& layer : rep.blocks) EXPECT_EQ(layer, got);
  }

  // Working rows of every layer: the history rows of the chosen blocks, keys rotated from
  // position r to position i, values unchanged.
  for (int l = 0; l < s.n_layers; ++l) {
    std::vector<RowSpan> rows;
    std::vector<int64_t> from_blocks, from_spans;
    for (int64_t b : rep.blocks[l]) {
      rows.push_back({b * 8, (b + 1) * 8});
      for (int64_t r = b * 8; r < (b + 1) * 8; ++r) from_blocks.push_back(r);
    }
    for (const RowSpan& span : rep.rows[l]) {
      for (int64_t r = span.begin; r < span.end; ++r) from_spans.push_back(r);
    }
    EXPECT_EQ(from_spans, from_blocks) << "layer " << l;  // the blocks' rows, whole
    ExpectWorkingRows(*model_, *pool_, *mem, l, rows);
  }
  ASSERT_TRUE(mem->EndTurn(false).ok());
  EXPECT_EQ(mem->history_rows(), 128);
}

TEST_P(MemArtTest, Layer0SelectionMatchesDirectEquations) {
  CheckLayer0Selection(BlockScore::kUpperBound);
}

TEST_P(MemArtTest, Layer0ExactSelectionMatchesDirectMaxDot) {
  CheckLayer0Selection(BlockScore::kExact);
}

TEST_P(MemArtTest, RetrievalHeadChoosesForEveryLayer) {
  CheckLayer0Selection(BlockScore::kUpperBound, 1);
}

TEST_P(MemArtTest, NeighboursOfTheBestBlockAreRead) {
  CheckLayer0Selection(BlockScore::kUpperBound, -1, 1);
}

TEST_P(MemArtTest, TurnBoundedNeighboursOfOneBlockTurnsAreNone) {
  CheckLayer0Selection(BlockScore::kUpperBound, -1, 1, /*one_block_turns=*/true);
}

// Only the scoring tokens' rows score: per layer, and with a retrieval head (the two-pass path).
TEST_P(MemArtTest, ScoringTokensAloneChoose) {
  for (const tokenizer::TokenSpan r : {tokenizer::TokenSpan{7, 12}, tokenizer::TokenSpan{0, 1}, tokenizer::TokenSpan{3, -1}}) {
    SCOPED_TRACE(std::to_string(r.begin) + ".." + std::to_string(r.end));
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(32), 64);
    CheckLayer0Selection(BlockScore::kExact, -1, 0, false, r);
    pool_ = std::make_unique<kv::KvPool>(model_->kv_geometry(32), 64);
    CheckLayer0Selection(BlockScore::kUpperBound, 1, 0, false, r);
  }
}

// Turns are what each EndTurn appended, or the turns it marked; a block's turn blocks cover the
// turns it overlaps; a restored history takes its turns back.
TEST_P(MemArtTest, TurnsAreRememberedMarkedAndRestored) {
  MemArtConfig config;
  config.block_size = 8;
  auto mem = Make(config);
  EXPECT_TRUE(mem->turn_starts().empty());
  Remember(mem.get(), 0, 60);
  EXPECT_EQ(mem->turn_starts(), (std::vector<int64_t>{0}));
  EXPECT_EQ(mem->TurnBlocks(3), (BlockSpan{0, 7}));  // the one turn, rows 0-59
  // Offsets not ascending within the turn's rows: refused, and nothing joins the history.
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{20, 10}, {0, 68}, {-1}, {0, 0}}) {
    ASSERT_TRUE(mem->BeginTurn(Tokens(60, 128), &threads_, nullptr).ok());
    EXPECT_EQ(mem->turn_rows(), 68);
    EXPECT_EQ(mem->EndTurn(true, bad).code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(mem->history_rows(), 60);
  }
  ASSERT_TRUE(mem->BeginTurn(Tokens(60, 128), &threads_, nullptr).ok());
  const std::vector<int64_t> offsets = {0, 40};  // a prompt and its reply, say
  ASSERT_TRUE(mem->EndTurn(true, offsets).ok());
  EXPECT_EQ(mem->turn_starts(), (std::vector<int64_t>{0, 60, 100}));
  EXPECT_EQ(mem->TurnBlocks(7), (BlockSpan{0, 12}));    // rows 56-63 straddle turns 0-59, 60-99
  EXPECT_EQ(mem->TurnBlocks(8), (BlockSpan{7, 12}));    // turn 60-99
  EXPECT_EQ(mem->TurnBlocks(13), (BlockSpan{12, 15}));  // turn 100-127
  // No offsets: the turn continues the last one.
  ASSERT_TRUE(mem->BeginTurn(Tokens(128, 140), &threads_, nullptr).ok());
  ASSERT_TRUE(mem->EndTurn(true, {}).ok());
  EXPECT_EQ(mem->turn_starts(), (std::vector<int64_t>{0, 60, 100}));
  EXPECT_EQ(mem->TurnBlocks(13), (BlockSpan{12, 17}));  // turn 100-139

  // A history as a store gives it back: rows at positions 0..N-1 in storage order.
  auto history = [&] {
    auto seq = std::make_unique<kv::KvSequence>(pool_.get());
    seq->set_window_release(false);  // gemma3: a history keeps every row
    std::vector<float> logits;
    EXPECT_TRUE(
        engine::Forward(*model_, &threads_, seq.get(), Tokens(0, 128), 0, false, &logits).ok());
    return seq;
  };
  const std::vector<int64_t> starts = {0, 60, 100};
  auto restored = MemArtMemory::Restore(*model_, pool_.get(), config, history(), starts);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ((*restored)->turn_starts(), starts);
  auto unknown = MemArtMemory::Restore(*model_, pool_.get(), config, history());
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ((*unknown)->turn_starts(), (std::vector<int64_t>{0}));  // one turn
  EXPECT_EQ((*unknown)->TurnBlocks(5), (BlockSpan{0, 15}));
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{60, 0}, {0, 60, 60}, {0, 128}, {-1, 5}}) {
    EXPECT_EQ(MemArtMemory::Restore(*model_, pool_.get(), config, history(), bad).status().code(),
              ErrorCode::kCorrupt);
  }
}

TEST(HeadRef, ParsesAndNamesLayerDotHead) {
  auto h = ParseHeadRef("11.2");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, (HeadRef{11, 2}));
  EXPECT_EQ(HeadRefName(*h), "11.2");
  EXPECT_EQ(HeadRefName({0, 13}), "0.13");
  for (const char* bad : {"", "7", "7.", ".1", "7.1.2", "-1.0", "7.x", "1 .2", "1234567.0"}) {
    EXPECT_EQ(ParseHeadRef(bad).status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST_P(MemArtTest, RetrievalHeadsMustBeHeadsOfTheModel) {
  MemArtConfig config;
  config.retrieval_heads = {{model_->spec().n_layers, 0}};
  EXPECT_FALSE(MemArtMemory::Create(*model_, pool_.get(), config).ok());
  config.retrieval_heads = {{0, model_->spec().n_heads}};
  EXPECT_FALSE(MemArtMemory::Create(*model_, pool_.get(), config).ok());
  config.retrieval_heads = {{0, -1}};
  EXPECT_FALSE(MemArtMemory::Create(*model_, pool_.get(), config).ok());
  config.retrieval_heads = {};
  auto mem = MemArtMemory::Create(*model_, pool_.get(), config);
  ASSERT_TRUE(mem.ok());
  config.retrieval_heads = {{-1, 0}};
  EXPECT_FALSE((*mem)->Reconfigure(config).ok());
}

TEST_P(MemArtTest, CoupledPositionsKeepOriginalPlaces) {
  MemArtConfig config;
  config.block_size = 8;
  config.top_k = 2;
  config.coupled_positions = true;
  auto mem = Make(config);
  Remember(mem.get(), 0, 64);
  RetrievalReport rep;
  ASSERT_TRUE(mem->BeginTurn(Tokens(64, 70), &threads_, &rep).ok());
  ASSERT_EQ(rep.retrieved_rows, 16);
  EXPECT_EQ(mem->next_position(), 70);  // after the whole history, not after R
  for (int l = 0; l < model_->spec().n_layers; ++l) {
    std::vector<int64_t> positions;
    for (const kv::ViewRun& run : mem->working()->view().layer(l)) {
      for (int i = 0; i < run.n_rows; ++i) positions.push_back(run.first_pos + i);
    }
    std::vector<int64_t> want;
    for (int64_t b : rep.blocks[l]) {
      for (int64_t r = b * 8; r < (b + 1) * 8; ++r) want.push_back(r);
    }
    for (int64_t p = 64; p < 70; ++p) want.push_back(p);
    EXPECT_EQ(positions, want) << "layer " << l;
  }
  ASSERT_TRUE(mem->EndTurn(true).ok());
  EXPECT_EQ(mem->history_rows(), 70);
}

TEST_P(MemArtTest, RejectsBadConfigAndTurnMisuse) {
  MemArtConfig bad;
  bad.block_size = 12;
  EXPECT_FALSE(MemArtMemory::Create(*model_, pool_.get(), bad).ok());
  bad = {};
  bad.top_k = -1;
  EXPECT_FALSE(MemArtMemory::Create(*model_, pool_.get(), bad).ok());
  auto mem = Make({});
  EXPECT_FALSE(mem->EndTurn(true).ok());
  ASSERT_TRUE(mem->BeginTurn(Tokens(0, 5), &threads_, nullptr).ok());
  EXPECT_FALSE(mem->BeginTurn(Tokens(0, 5), &threads_, nullptr).ok());
  ASSERT_TRUE(mem->EndTurn(true).ok());
  EXPECT_EQ(mem->history_rows(), 5);
  // Scoring tokens that are not a non-empty range of the query: refused, no turn opened.
  for (const tokenizer::TokenSpan r : {tokenizer::TokenSpan{-1, 2}, tokenizer::TokenSpan{3, 3}, tokenizer::TokenSpan{4, 2},
                             tokenizer::TokenSpan{0, 6}, tokenizer::TokenSpan{5, -1}}) {
    EXPECT_EQ(mem->BeginTurn(Tokens(5, 10), &threads_, nullptr, r).code(),
              ErrorCode::kInvalidArgument)
        << r.begin << ".." << r.end;
    EXPECT_EQ(mem->working()->n_rows(), 0);
  }
  ASSERT_TRUE(mem->BeginTurn(Tokens(5, 10), &threads_, nullptr, {4, 5}).ok());
  ASSERT_TRUE(mem->EndTurn(true).ok());
  EXPECT_EQ(mem->history_rows(), 10);
}

INSTANTIATE_TEST_SUITE_P(Archs, MemArtTest, ::testing::Values("llama", "gemma3"));

}  // namespace
}  // namespace kvmem::memory
