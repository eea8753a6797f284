// The paged store of every K/V row of every layer. Storage is a set of blocks; a block holds
// `block_rows` token rows for all layers and all KV heads, so a row is named by (block, row) in
// every layer at once. Keys are stored already rotated by RoPE at the position recorded for the
// row (`rotated_pos`); moving a row to another logical position re-rotates it in place
// (Reposition), an exact rotation by the difference, losing only f16 rounding. This keeps the
// plain decode path free of per-step rotation while history can be re-placed without a forward
// pass (DESIGN.md "Positions are decoupled from storage").
//
// Layout of one block, per layer l and KV head h:
//   K[l][h] : (block_rows, head_dim_k) f16, contiguous
//   V[l][h] : (block_rows, head_dim_v) f16, contiguous
// so attention reads each (layer, head) of a block as one contiguous span.
//
// Thread-safety: allocation (Allocate/Free) is not thread-safe; concurrent writes to distinct
// rows and concurrent reads are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace kvmem::kv {

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  int block_rows = 256;
};

// How keys of one layer are rotated (differs per layer for sliding-window models).
struct RopeSpec {
  int rot_dim = 0;
  float freq_base = 10000.0f;
  kernels::RopeMode mode = kernels::RopeMode::kNormal;
};

struct RowRef {
  int32_t block = -1;
  int32_t row = -1;
  bool operator==(const RowRef&) const = default;
};

inline constexpr int64_t kNoPosition = INT64_MIN;

class KvPool {
 public:
  // max_blocks bounds memory: Allocate fails with ResourceExhausted beyond it.
  KvPool(KvGeometry geometry, int max_blocks);

  const KvGeometry& geometry() const { return geo_; }
  int max_blocks() const { return max_blocks_; }
  int blocks_in_use() const { return in_use_; }
  size_t bytes_per_block() const { return block_bytes_; }

  // A fresh block whose rows have no position yet. Memory is reused from freed blocks first.
  Result<int32_t> Allocate();
  void Free(int32_t block);

  // (block_rows, head_dim_k) keys of one layer and KV head.
  uint16_t* K(int32_t block, int layer, int head);
  const uint16_t* K(int32_t block, int layer, int head) const;
  uint16_t* V(int32_t block, int layer, int head);
  const uint16_t* V(int32_t block, int layer, int head) const;

  // Stores one token's K and V rows of `layer`: k (n_kv_heads, head_dim_k), v (n_kv_heads,
  // head_dim_v), converted to the pool's storage format.
  void WriteToken(RowRef r, int layer, const float* k, const float* v);

  // Rows [first_row, first_row + n_rows) of one block, layer and KV head, as the attention
  // kernel reads them.
  kernels::KvSpan Span(int32_t block, int layer, int head, int32_t first_row,
                       int32_t n_rows) const;
  // out (head_dim_v) = attention of q (head_dim_k) over the rows of `spans`, in order.
  void Attend(const float* q, const kernels::KvSpan* spans, int n_spans, float scale,
              float* out) const;
  // The softmax weights of the same computation, one per row (for taps).
  void AttentionWeights(const float* q, const kernels::KvSpan* spans, int n_spans, float scale,
                        float* weights) const;

  // The position the stored keys of a row were rotated at (same in every layer), or kNoPosition.
  int64_t rotated_pos(RowRef r) const { return blocks_[r.block].rotated_pos[r.row]; }
  void set_rotated_pos(RowRef r, int64_t pos) { blocks_[r.block].rotated_pos[r.row] = pos; }

  // Re-rotates the keys of `n` consecutive rows starting at `first` in every layer so that they
  // read as if computed at positions new_pos, new_pos+1, ...; `rope` has one entry per layer.
  void Reposition(RowRef first, int n, int64_t new_pos, const std::vector<RopeSpec>& rope);

 private:
  struct Block {
    std::unique_ptr<uint16_t[]> data;  // layers x {K heads, V heads}
    std::vector<int64_t> rotated_pos;  // (block_rows)
    bool used = false;
  };
  size_t KOffset(int layer, int head) const;
  size_t VOffset(int layer, int head) const;

  KvGeometry geo_;
  int max_blocks_;
  size_t block_elems_ = 0;
  size_t block_bytes_ = 0;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  int in_use_ = 0;
};

}  // namespace kvmem::kv
