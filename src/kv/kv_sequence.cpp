#include "kv/kv_sequence.h"

#include <algorithm>

namespace kvmem::kv {

KvSequence::KvSequence(KvPool* pool)
    : pool_(pool),
      view_(pool->geometry().n_layers, pool->geometry().n_kv_heads),
      released_blocks_(pool->geometry().n_layers, 0),
      released_through_(pool->geometry().n_layers, kNoPosition) {}

std::unique_ptr<KvSequence> KvSequence::Fork(const KvSequence& parent) {
  auto fork = std::make_unique<KvSequence>(parent.pool_);
  fork->view_ = parent.view_.Clone();
  return fork;
}

void KvSequence::ReadShared(std::span<const RowRef> rows, int64_t first_pos) {
  // Runs of consecutive rows of one block, as the view stores them.
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j].block == rows[i].block &&
           rows[j].row == rows[j - 1].row + 1) {
      ++j;
    }
    view_.Append(rows[i], static_cast<int>(j - i), first_pos + static_cast<int64_t>(i));
    i = j;
  }
}

std::vector<int32_t> KvSequence::TakeBlocks() {
  std::vector<int32_t> out = std::move(blocks_);
  blocks_.clear();
  n_rows_ = 0;
  view_.Clear();
  std::fill(released_blocks_.begin(), released_blocks_.end(), 0);
  std::fill(released_through_.begin(), released_through_.end(), kNoPosition);
  return out;
}

KvSequence::~KvSequence() {
  for (int32_t b : blocks_) pool_->Free(b);
}

Result<std::vector<RowRef>> KvSequence::AppendRows(int n, int64_t first_pos) {
  const int block_rows = pool_->geometry().block_rows;
  const int64_t needed_rows = n_rows_ + n;
  const int64_t needed_blocks = (needed_rows + block_rows - 1) / block_rows;
  std::vector<int32_t> fresh;
  while (static_cast<int64_t>(blocks_.size() + fresh.size()) < needed_blocks) {
    Result<int32_t> b = pool_->Allocate();
    if (!b.ok()) {
      for (int32_t f : fresh) pool_->Free(f);
      return b.status();
    }
    fresh.push_back(*b);
  }
  blocks_.insert(blocks_.end(), fresh.begin(), fresh.end());

  std::vector<RowRef> rows(n);
  for (int i = 0; i < n; ++i) {
    const int64_t idx = n_rows_ + i;
    rows[i] = {blocks_[idx / block_rows], static_cast<int32_t>(idx % block_rows)};
  }
  // Add to the view in runs that stay inside one block.
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && rows[j].block == rows[i].block) ++j;
    view_.Append(rows[i], j - i, first_pos + i);
    i = j;
  }
  n_rows_ = needed_rows;
  return rows;
}

void KvSequence::Truncate(int64_t n) {
  if (n >= n_rows_) return;
  const int block_rows = pool_->geometry().block_rows;
  // Remove the dropped rows from every view list wherever they appear (views need not be in
  // storage order), then free the blocks that hold no kept row.
  for (int64_t i = std::max<int64_t>(n, 0); i < n_rows_;) {
    const int32_t row = static_cast<int32_t>(i % block_rows);
    const int count = static_cast<int>(std::min<int64_t>(block_rows - row, n_rows_ - i));
    view_.Hide({blocks_[i / block_rows], row}, count);
    i += count;
  }
  const size_t keep_blocks = static_cast<size_t>((n + block_rows - 1) / block_rows);
  for (size_t i = keep_blocks; i < blocks_.size(); ++i) pool_->Free(blocks_[i]);
  blocks_.resize(keep_blocks);
  for (size_t& r : released_blocks_) r = std::min(r, keep_blocks);
  // The kept block's dropped rows are free again: the next append writes them afresh (for
  // kivi4 keys, into the staging group rather than requantizing a completed group).
  if (n % block_rows != 0) pool_->DropRows(blocks_.back(), static_cast<int32_t>(n % block_rows));
  n_rows_ = n;
  if (n == 0) {  // nothing released remains: the sequence starts over
    std::fill(released_blocks_.begin(), released_blocks_.end(), 0);
    std::fill(released_through_.begin(), released_through_.end(), kNoPosition);
  }
}

void KvSequence::ReleaseStorage(size_t index, int layer) {
  const int32_t b = blocks_[index];
  if (!pool_->has_layer(b, layer)) return;
  view_.Hide({b, 0}, pool_->geometry().block_rows, layer);
  pool_->ReleaseLayer(b, layer);
}

size_t KvSequence::ReleaseLayerThrough(int layer, int64_t cut) {
  const int block_rows = pool_->geometry().block_rows;
  const size_t whole_blocks = static_cast<size_t>(n_rows_ / block_rows);
  size_t released = 0;
  for (size_t& i = released_blocks_[layer]; i < whole_blocks; ++i) {
    const int32_t b = blocks_[i];
    int64_t last = kNoPosition;
    bool out_of_reach = true;
    for (int32_t r = 0; r < block_rows && out_of_reach; ++r) {
      const int64_t pos = pool_->rotated_pos({b, r});
      out_of_reach = pos != kNoPosition && pos <= cut;
      last = std::max(last, pos);
    }
    if (!out_of_reach) break;
    if (pool_->has_layer(b, layer)) {
      view_.Hide({b, 0}, block_rows, layer);
      pool_->ReleaseLayer(b, layer);
      released += pool_->layer_bytes();
    }
    released_through_[layer] = std::max(released_through_[layer], last);
  }
  return released;
}

bool KvSequence::Owns(RowRef r) const {
  const int block_rows = pool_->geometry().block_rows;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i] == r.block) {
      return r.row >= 0 && static_cast<int64_t>(i) * block_rows + r.row < n_rows_;
    }
  }
  return false;
}

}  // namespace kvmem::kv
