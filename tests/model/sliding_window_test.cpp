// Which rows a token reads in a sliding-window layer (CollectVisible): exactly the live rows at
// view positions p - W < pos <= p (llama.cpp's LLAMA_SWA_TYPE_STANDARD), across blocks, position
// gaps and custom visibility; window 0 keeps plain causal visibility. The forward-pass property
// (rows out of the window change nothing) is tests/engine/gemma3_window_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "kv/kv_sequence.h"
#include "model/transformer_block.h"

namespace kvmem::model {
namespace {

constexpr int kBlockRows = 8;

class SlidingWindowTest : public ::testing::Test {
 protected:
  // Positions of the rows token `pos` reads, as CollectVisible names them.
  std::multiset<int64_t> Read(int64_t pos, int window,
                              const std::vector<RowRange>* allowed = nullptr) {
    const std::vector<int64_t> positions = {pos};
    std::vector<std::vector<RowRange>> allow;
    if (allowed) allow.push_back(*allowed);
    const Visibility vis{positions, allow};
    std::vector<kernels::KvSpan> spans;
    std::vector<RowRange> ranges;
    CollectVisible(seq_.view(), pool_, /*layer=*/0, /*head=*/0, window, vis, 0, &spans, &ranges);
    EXPECT_EQ(spans.size(), ranges.size());
    std::multiset<int64_t> out;
    for (const RowRange& r : ranges) {
      for (int32_t i = 0; i < r.n_rows; ++i) out.insert(pos_of_.at({r.block, r.first_row + i}));
    }
    return out;
  }

  void Append(int n, int64_t first_pos) {
    auto rows = seq_.AppendRows(n, first_pos);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    for (int i = 0; i < n; ++i) pos_of_[{(*rows)[i].block, (*rows)[i].row}] = first_pos + i;
  }

  static std::multiset<int64_t> Span(int64_t lo, int64_t hi) {  // [lo, hi]
    std::multiset<int64_t> s;
    for (int64_t p = lo; p <= hi; ++p) s.insert(p);
    return s;
  }

  kv::KvPool pool_{
      {.n_layers = 1, .n_kv_heads = 1, .head_dim_k = 4, .head_dim_v = 4, .block_rows = kBlockRows},
      8};
  kv::KvSequence seq_{&pool_};
  std::map<std::pair<int32_t, int32_t>, int64_t> pos_of_;
};

TEST_F(SlidingWindowTest, WindowOfPositionsAcrossBlocks) {
  Append(20, 0);  // positions 0..19 over blocks of 8
  for (int64_t p = 0; p < 20; ++p) {
    EXPECT_EQ(Read(p, 0), Span(0, p)) << "global, pos " << p;
    for (int w : {1, 3, 8, 9, 20, 100}) {
      EXPECT_EQ(Read(p, w), Span(std::max<int64_t>(0, p - w + 1), p)) << "pos " << p << " W " << w;
    }
  }
}

TEST_F(SlidingWindowTest, CountsPositionsNotRows) {
  Append(10, 0);
  Append(6, 100);  // a jump: rows at 0..9 and 100..105
  EXPECT_EQ(Read(105, 4), Span(102, 105));
  std::multiset<int64_t> want = Span(9, 9);
  for (int64_t p : Span(100, 103)) want.insert(p);
  EXPECT_EQ(Read(103, 95), want);                    // (8, 103]
  EXPECT_EQ(Read(50, 4), std::multiset<int64_t>{});  // nothing in (46, 50]
  EXPECT_EQ(Read(50, 0), Span(0, 9));
}

TEST_F(SlidingWindowTest, IntersectsWithAllowedRows) {
  Append(20, 0);
  const int32_t b1 = seq_.blocks()[1];                 // positions 8..15
  const std::vector<RowRange> allowed = {{b1, 2, 5}};  // positions 10..14
  EXPECT_EQ(Read(15, 0, &allowed), Span(10, 14));
  EXPECT_EQ(Read(15, 4, &allowed), Span(12, 14));  // window (11, 15]
  EXPECT_EQ(Read(19, 4, &allowed), std::multiset<int64_t>{});
}

TEST_F(SlidingWindowTest, HiddenRowsStayHidden) {
  Append(20, 0);
  seq_.view().Hide({seq_.blocks()[1], 6}, 2);  // positions 14..15
  seq_.view().Hide({seq_.blocks()[2], 0}, 1);  // position 16
  std::multiset<int64_t> want = Span(12, 13);
  for (int64_t p : Span(17, 18)) want.insert(p);
  EXPECT_EQ(Read(18, 7), want);
}

}  // namespace
}  // namespace kvmem::model
