#include "memory/retrieval/block_index.h"

#include <cassert>
#include <cmath>
#include <string>

#include "core/fp16.h"

namespace kvmem::memory {
namespace {

constexpr uint16_t kF16PosInf = 0x7c00;
constexpr uint16_t kF16NegInf = 0xfc00;

// The next half toward +inf of a finite or infinite, non-NaN half.
uint16_t NextUp(uint16_t h) {
  if (h == kF16PosInf) return h;
  if (h == 0x8000) return 0x0001;  // -0 -> smallest positive subnormal
  if (h & 0x8000) return h - 1;    // negative: toward zero
  return h + 1;
}

uint16_t NextDown(uint16_t h) {
  if (h == kF16NegInf) return h;
  if (h == 0x0000) return 0x8001;  // +0 -> smallest negative subnormal
  if (h & 0x8000) return h + 1;    // negative: away from zero
  return h - 1;
}

}  // namespace

uint16_t F16RoundDown(float x) {
  const uint16_t h = F32ToF16(x);
  if (std::isnan(x) || F16ToF32(h) <= x) return h;
  return NextDown(h);
}

uint16_t F16RoundUp(float x) {
  const uint16_t h = F32ToF16(x);
  if (std::isnan(x) || F16ToF32(h) >= x) return h;
  return NextUp(h);
}

BlockIndex::BlockIndex(int n_layers, int n_kv_heads, int head_dim)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      boxes_(static_cast<size_t>(n_layers) * n_kv_heads) {}

int64_t BlockIndex::AddBlock() {
  for (std::vector<uint16_t>& boxes : boxes_) {
    boxes.insert(boxes.end(), head_dim_, kF16PosInf);  // minima
    boxes.insert(boxes.end(), head_dim_, kF16NegInf);  // maxima
  }
  return n_blocks_++;
}

uint16_t* BlockIndex::MutableBox(int64_t block, int layer, int head) {
  assert(block >= 0 && block < n_blocks_ && layer >= 0 && layer < n_layers_ && head >= 0 &&
         head < n_kv_heads_);
  return head_boxes(layer, head).data() + static_cast<size_t>(block) * box_elems();
}

void BlockIndex::Enclose(int64_t block, int layer, int head, const float* keys, int n_rows,
                         int64_t stride) {
  uint16_t* lo = MutableBox(block, layer, head);
  uint16_t* hi = lo + head_dim_;
  for (int d = 0; d < head_dim_; ++d) {
    float row_min = INFINITY, row_max = -INFINITY;
    for (int i = 0; i < n_rows; ++i) {
      const float k = keys[i * stride + d];
      row_min = std::fmin(row_min, k);
      row_max = std::fmax(row_max, k);
    }
    if (row_min < F16ToF32(lo[d])) lo[d] = F16RoundDown(row_min);
    if (row_max > F16ToF32(hi[d])) hi[d] = F16RoundUp(row_max);
  }
}

void BlockIndex::Truncate(int64_t n) {
  if (n >= n_blocks_) return;
  for (std::vector<uint16_t>& boxes : boxes_) boxes.resize(static_cast<size_t>(n) * box_elems());
  n_blocks_ = n;
}

std::span<const uint16_t> BlockIndex::Box(int64_t block, int layer, int head) const {
  return {const_cast<BlockIndex*>(this)->MutableBox(block, layer, head), box_elems()};
}

std::span<const uint16_t> BlockIndex::HeadBoxes(int layer, int head) const {
  return boxes_[static_cast<size_t>(layer) * n_kv_heads_ + head];
}

std::vector<uint16_t> BlockIndex::LayerBoxes(int layer) const {
  std::vector<uint16_t> out;
  for (int h = 0; h < n_kv_heads_; ++h) {
    const std::span<const uint16_t> b = HeadBoxes(layer, h);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

Status BlockIndex::LoadLayer(int layer, int64_t n_blocks, std::span<const uint16_t> boxes) {
  if (layer < 0 || layer >= n_layers_) {
    return InvalidArgument("block index: layer " + std::to_string(layer) + " out of range");
  }
  const size_t per_head = static_cast<size_t>(n_blocks) * box_elems();
  if (n_blocks < 0 || boxes.size() != per_head * n_kv_heads_) {
    return InvalidArgument("block index: layer " + std::to_string(layer) + " holds " +
                           std::to_string(boxes.size()) + " values, expected " +
                           std::to_string(n_blocks) + " blocks of " +
                           std::to_string(box_elems() * n_kv_heads_));
  }
  if (layer == 0 && n_blocks != n_blocks_) {  // layer 0 sets the count; the others follow it
    n_blocks_ = n_blocks;
    for (std::vector<uint16_t>& b : boxes_) b.assign(per_head, kF16PosInf);
  } else if (n_blocks != n_blocks_) {
    return InvalidArgument("block index: layer " + std::to_string(layer) + " has " +
                           std::to_string(n_blocks) + " blocks, layer 0 has " +
                           std::to_string(n_blocks_));
  }
  for (int h = 0; h < n_kv_heads_; ++h) {
    head_boxes(layer, h).assign(boxes.begin() + h * per_head, boxes.begin() + (h + 1) * per_head);
  }
  return Status::Ok();
}

size_t BlockIndex::bytes() const {
  size_t n = 0;
  for (const std::vector<uint16_t>& b : boxes_) n += b.size() * sizeof(uint16_t);
  return n;
}

}  // namespace kvmem::memory
