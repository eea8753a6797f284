// MemArt's compressed keys (../shared/papers/memart.txt §3.2.1, Eq. 2): an agent's history cut
// into memory blocks of BS consecutive rows, and for each block, layer and KV head the
// axis-aligned bounding box of its position-free keys — per dimension the minimum and maximum
// over the block's rows. A query scores a block by the box's upper bound on q . k (Eq. 3,
// block_scoring.h) without reading the block's keys.
//
// Boxes are stored as f16 rounded outward (min down, max up), so the stored box still encloses
// every key and Eq. 3 stays an upper bound; that halves the index (2 x head_dim halves per
// block, layer and head: 1/BS of an f16 K cache, 1/(BS/2) of a q8_0 one).
// Thread-safety: a plain value; const methods may run concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvmem::memory {

class BlockIndex {
 public:
  BlockIndex() = default;
  BlockIndex(int n_layers, int n_kv_heads, int head_dim);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t n_blocks() const { return n_blocks_; }

  // Appends a block with empty boxes (min = +inf, max = -inf in every layer and head); returns
  // its index. Blocks are numbered in history order.
  int64_t AddBlock();
  // Widens the box of (block, layer, head) to enclose n_rows keys: row i is keys[i * stride ..
  // + head_dim) (position-free, i.e. not rotated).
  void Enclose(int64_t block, int layer, int head, const float* keys, int n_rows, int64_t stride);
  // Keeps the first n blocks.
  void Truncate(int64_t n);

  // The stored box of (block, layer, head): head_dim f16 minima, then head_dim f16 maxima.
  std::span<const uint16_t> Box(int64_t block, int layer, int head) const;
  // The boxes of (layer, head) as a matrix of n_blocks rows of 2 * head_dim f16 (minima, then
  // maxima): Eq. 3 for a query q is this matrix times (min(q, 0), max(q, 0)).
  std::span<const uint16_t> HeadBoxes(int layer, int head) const;

  // Persistence: the boxes of one layer, (n_kv_heads, n_blocks, 2, head_dim) f16 (HeadBoxes of
  // each head in turn), for n_blocks blocks. Load layer 0 first: it sets the block count, and the
  // other layers must agree. Fails (InvalidArgument) when a size does not match.
  std::vector<uint16_t> LayerBoxes(int layer) const;
  Status LoadLayer(int layer, int64_t n_blocks, std::span<const uint16_t> boxes);
  size_t bytes() const;

 private:
  size_t box_elems() const { return 2 * static_cast<size_t>(head_dim_); }
  std::vector<uint16_t>& head_boxes(int layer, int head) {
    return boxes_[static_cast<size_t>(layer) * n_kv_heads_ + head];
  }
  uint16_t* MutableBox(int64_t block, int layer, int head);

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  int64_t n_blocks_ = 0;
  std::vector<std::vector<uint16_t>> boxes_;  // (n_layers, n_kv_heads) of (n_blocks, 2, head_dim)
};

// f16 rounding toward -inf and +inf: the largest half <= x and the smallest half >= x (NaN stays
// NaN; beyond the f16 range, -inf / +inf).
uint16_t F16RoundDown(float x);
uint16_t F16RoundUp(float x);

}  // namespace kvmem::memory
