#include <gtest/gtest.h>

#include "kv/kv_pool.h"
#include "kv/kv_sequence.h"
#include "kv/kv_view.h"

namespace kvmem::kv {
namespace {

KvGeometry SmallGeometry() { return {/*n_layers=*/2, /*n_kv_heads=*/2, 8, 8, /*block_rows=*/4}; }

TEST(KvSequence, AppendsContiguousRowsAcrossBlocks) {
  KvPool pool(SmallGeometry(), 8);
  KvSequence seq(&pool);
  auto rows = seq.AppendRows(6, 0);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(pool.blocks_in_use(), 2);
  EXPECT_EQ((*rows)[4], (RowRef{seq.blocks()[1], 0}));
  // One run per block, positions continuing.
  const auto& runs = seq.view().layer(0);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].n_rows, 4);
  EXPECT_EQ(runs[1].first_pos, 4);
  auto more = seq.AppendRows(1, 6);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(seq.view().layer(1).size(), 2u);  // merged into the last run
  EXPECT_EQ(seq.view().n_rows(1), 7);
}

TEST(KvSequence, FailsWithoutSideEffectsWhenPoolFull) {
  KvPool pool(SmallGeometry(), 2);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.AppendRows(5, 0).ok());
  auto r = seq.AppendRows(4, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(seq.n_rows(), 5);
  EXPECT_EQ(seq.view().n_rows(0), 5);
  EXPECT_EQ(pool.blocks_in_use(), 2);
}

TEST(KvSequence, TruncateFreesBlocks) {
  KvPool pool(SmallGeometry(), 8);
  {
    KvSequence seq(&pool);
    ASSERT_TRUE(seq.AppendRows(10, 0).ok());
    EXPECT_EQ(pool.blocks_in_use(), 3);
    seq.Truncate(5);
    EXPECT_EQ(pool.blocks_in_use(), 2);
    EXPECT_EQ(seq.view().n_rows(0), 5);
    ASSERT_TRUE(seq.AppendRows(2, 5).ok());
    EXPECT_EQ(seq.view().n_rows(0), 7);
  }
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

TEST(KvView, PerLayerListIsIndependent) {
  KvView v(3);
  v.Append({0, 0}, 4, 0);
  v.mutable_layer(1).erase(v.mutable_layer(1).begin());
  EXPECT_EQ(v.n_rows(1), 0);
  EXPECT_EQ(v.n_rows(0), 4);
  v.Append({1, 0}, 2, 4);
  EXPECT_EQ(v.n_rows(1), 2);
  EXPECT_EQ(v.n_rows(2), 6);
  v.Truncate(3);
  EXPECT_EQ(v.n_rows(0), 3);
  EXPECT_EQ(v.n_rows(1), 2);
}

}  // namespace
}  // namespace kvmem::kv
