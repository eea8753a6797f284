#include "kv/kv_pool.h"

#include <cassert>
#include <vector>

#include "core/fp16.h"

namespace kvmem::kv {

KvPool::KvPool(KvGeometry geometry, int max_blocks) : geo_(geometry), max_blocks_(max_blocks) {
  const size_t per_layer =
      static_cast<size_t>(geo_.n_kv_heads) * geo_.block_rows * (geo_.head_dim_k + geo_.head_dim_v);
  block_elems_ = per_layer * geo_.n_layers;
  block_bytes_ = block_elems_ * sizeof(uint16_t);
}

size_t KvPool::KOffset(int layer, int head) const {
  const size_t rows = geo_.block_rows;
  const size_t layer_elems = geo_.n_kv_heads * rows * (geo_.head_dim_k + geo_.head_dim_v);
  return layer * layer_elems + head * rows * geo_.head_dim_k;
}

size_t KvPool::VOffset(int layer, int head) const {
  const size_t rows = geo_.block_rows;
  const size_t layer_elems = geo_.n_kv_heads * rows * (geo_.head_dim_k + geo_.head_dim_v);
  return layer * layer_elems + geo_.n_kv_heads * rows * geo_.head_dim_k + head * rows * geo_.head_dim_v;
}

Result<int32_t> KvPool::Allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    if (static_cast<int>(blocks_.size()) >= max_blocks_) {
      return Status(ErrorCode::kResourceExhausted,
                    "KV pool full: " + std::to_string(max_blocks_) + " blocks of " +
                        std::to_string(geo_.block_rows) + " rows in use");
    }
    id = static_cast<int32_t>(blocks_.size());
    blocks_.emplace_back();
    // Not value-initialized: rows are written before they are read (views only cover rows
    // that hold data), and touching fresh pages here would cost more than the writes.
    blocks_[id].data.reset(new uint16_t[block_elems_]);
    blocks_[id].rotated_pos.resize(geo_.block_rows);
  }
  Block& b = blocks_[id];
  b.used = true;
  std::fill(b.rotated_pos.begin(), b.rotated_pos.end(), kNoPosition);
  ++in_use_;
  return id;
}

void KvPool::Free(int32_t block) {
  assert(block >= 0 && block < static_cast<int32_t>(blocks_.size()) && blocks_[block].used);
  blocks_[block].used = false;
  free_.push_back(block);
  --in_use_;
}

uint16_t* KvPool::K(int32_t block, int layer, int head) {
  return blocks_[block].data.get() + KOffset(layer, head);
}
const uint16_t* KvPool::K(int32_t block, int layer, int head) const {
  return blocks_[block].data.get() + KOffset(layer, head);
}
uint16_t* KvPool::V(int32_t block, int layer, int head) {
  return blocks_[block].data.get() + VOffset(layer, head);
}
const uint16_t* KvPool::V(int32_t block, int layer, int head) const {
  return blocks_[block].data.get() + VOffset(layer, head);
}

void KvPool::WriteToken(RowRef r, int layer, const float* k, const float* v) {
  const int hk = geo_.head_dim_k, hv = geo_.head_dim_v;
  for (int h = 0; h < geo_.n_kv_heads; ++h) {
    uint16_t* kd = K(r.block, layer, h) + static_cast<size_t>(r.row) * hk;
    uint16_t* vd = V(r.block, layer, h) + static_cast<size_t>(r.row) * hv;
    for (int d = 0; d < hk; ++d) kd[d] = F32ToF16(k[h * hk + d]);
    for (int d = 0; d < hv; ++d) vd[d] = F32ToF16(v[h * hv + d]);
  }
}

kernels::KvSpan KvPool::Span(int32_t block, int layer, int head, int32_t first_row,
                             int32_t n_rows) const {
  return {K(block, layer, head) + static_cast<size_t>(first_row) * geo_.head_dim_k,
          V(block, layer, head) + static_cast<size_t>(first_row) * geo_.head_dim_v, n_rows,
          geo_.head_dim_k};
}

void KvPool::Attend(const float* q, const kernels::KvSpan* spans, int n_spans, float scale,
                    float* out) const {
  kernels::AttendF16(q, geo_.head_dim_k, spans, n_spans, scale, out);
}

void KvPool::AttentionWeights(const float* q, const kernels::KvSpan* spans, int n_spans,
                              float scale, float* weights) const {
  kernels::AttentionWeightsF16(q, geo_.head_dim_k, spans, n_spans, scale, weights);
}

void KvPool::Reposition(RowRef first, int n, int64_t new_pos, const std::vector<RopeSpec>& rope) {
  assert(static_cast<int>(rope.size()) == geo_.n_layers);
  std::vector<float> tmp(geo_.head_dim_k);
  for (int i = 0; i < n; ++i) {
    RowRef r{first.block, first.row + i};
    const int64_t old_pos = rotated_pos(r);
    const int64_t target = new_pos + i;
    if (old_pos == kNoPosition || old_pos == target) continue;
    for (int l = 0; l < geo_.n_layers; ++l) {
      for (int h = 0; h < geo_.n_kv_heads; ++h) {
        uint16_t* k = K(r.block, l, h) + static_cast<size_t>(r.row) * geo_.head_dim_k;
        for (int d = 0; d < geo_.head_dim_k; ++d) tmp[d] = F16ToF32(k[d]);
        // Rotations compose: R(target) = R(target - old) R(old).
        kernels::Rope(tmp.data(), 1, geo_.head_dim_k, rope[l].rot_dim, target - old_pos,
                      rope[l].freq_base, rope[l].mode);
        for (int d = 0; d < geo_.head_dim_k; ++d) k[d] = F32ToF16(tmp[d]);
      }
    }
    set_rotated_pos(r, target);
  }
}

}  // namespace kvmem::kv
