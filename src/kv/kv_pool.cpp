#include "kv/kv_pool.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/kivi.h"
#include "kernels/type_traits.h"

namespace kvmem::kv {
namespace {

constexpr int kGroup = kernels::kKiviGroupRows;

// Rotates vectors of one layer by position deltas, evaluating the angles once per distinct
// delta in a row (re-placed runs move all their rows by one delta).
class DeltaRotator {
 public:
  DeltaRotator(const RopeSpec& rope, int head_dim) : rope_(rope), head_dim_(head_dim) {}
  // x: (n_heads, head_dim).
  void Rotate(float* x, int n_heads, int64_t delta) {
    if (!ready_ || delta != cache_.pos) {
      kernels::InitRopeCache(delta, rope_.rot_dim, rope_.freq_base, &cache_, rope_.factors(),
                             rope_.scaling);
      ready_ = true;
    }
    kernels::RopeWithCache(x, n_heads, head_dim_, cache_, rope_.mode);
  }

 private:
  const RopeSpec& rope_;
  int head_dim_;
  kernels::RopeCache cache_;
  bool ready_ = false;
};

}  // namespace

KvPool::KvPool(KvGeometry geometry, int max_blocks, KvFormats formats, LayerChunks* chunks)
    : geo_(geometry), max_blocks_(max_blocks), formats_(formats), chunks_(chunks) {
  assert(CheckKvFormats(formats, geo_.head_dim_k, geo_.head_dim_v).ok());
  layout_ = {KTypeOf(formats.k), VTypeOf(formats.v), geo_.head_dim_k};
  const size_t rows = geo_.block_rows;
  k_row_bytes_ = kernels::KRowBytes(layout_.k, geo_.head_dim_k);
  v_row_bytes_ = kernels::VRowBytes(layout_.v, geo_.head_dim_v);
  if (!kivi()) k_traits_ = kernels::GetTypeTraits(kernels::KRowDType(layout_.k));
  v_traits_ = kernels::GetTypeTraits(kernels::VRowDType(layout_.v));
  k_head_bytes_ =
      kivi() ? rows / kGroup * kernels::KiviGroupBytes(geo_.head_dim_k) : rows * k_row_bytes_;
  v_head_bytes_ = rows * v_row_bytes_;
  layer_bytes_ = static_cast<size_t>(geo_.n_kv_heads) * (k_head_bytes_ + v_head_bytes_);
  token_bytes_ = geo_.n_layers *
                 KvBytesPerTokenLayer(formats, geo_.n_kv_heads, geo_.head_dim_k, geo_.head_dim_v);
  staging_elems_ =
      kivi() ? static_cast<size_t>(geo_.n_layers) * geo_.n_kv_heads * kGroup * geo_.head_dim_k : 0;
  assert(chunks_ == nullptr || chunks_->chunk_bytes() == layer_bytes_);
  // Never reallocated: a block's entry stays where it is while other threads read other blocks
  // (see Thread-safety in the header). max_blocks bounds the pool's memory, so this is small.
  blocks_.reserve(static_cast<size_t>(std::max(max_blocks_, 0)));
}

KvPool::~KvPool() {
  if (chunks_ == nullptr) return;
  for (Block& b : blocks_) {
    for (LayerData& d : b.layers) {
      if (d) chunks_->Give(std::move(d));
    }
  }
  for (LayerData& d : spare_layers_) chunks_->Give(std::move(d));
}

uint8_t* KvPool::KData(Block& b, int layer, int head) const {
  assert(b.layers[layer] && "layer storage was released");
  return b.layers[layer].get() + head * k_head_bytes_;
}
const uint8_t* KvPool::KData(const Block& b, int layer, int head) const {
  assert(b.layers[layer] && "layer storage was released");
  return b.layers[layer].get() + head * k_head_bytes_;
}
uint8_t* KvPool::VData(Block& b, int layer, int head) const {
  return KData(b, layer, 0) + geo_.n_kv_heads * k_head_bytes_ + head * v_head_bytes_;
}
const uint8_t* KvPool::VData(const Block& b, int layer, int head) const {
  return KData(b, layer, 0) + geo_.n_kv_heads * k_head_bytes_ + head * v_head_bytes_;
}
uint16_t* KvPool::Staging(Block& b, int layer, int head) const {
  return b.staging.get() +
         (static_cast<size_t>(layer) * geo_.n_kv_heads + head) * kGroup * geo_.head_dim_k;
}
const uint16_t* KvPool::Staging(const Block& b, int layer, int head) const {
  return b.staging.get() +
         (static_cast<size_t>(layer) * geo_.n_kv_heads + head) * kGroup * geo_.head_dim_k;
}

uint16_t* KvPool::K(int32_t block, int layer, int head) {
  assert(layout_.k == kernels::KType::kF16);
  return reinterpret_cast<uint16_t*>(KData(blocks_[block], layer, head));
}
const uint16_t* KvPool::K(int32_t block, int layer, int head) const {
  assert(layout_.k == kernels::KType::kF16);
  return reinterpret_cast<const uint16_t*>(KData(blocks_[block], layer, head));
}
uint16_t* KvPool::V(int32_t block, int layer, int head) {
  assert(layout_.v == kernels::VType::kF16);
  return reinterpret_cast<uint16_t*>(VData(blocks_[block], layer, head));
}
const uint16_t* KvPool::V(int32_t block, int layer, int head) const {
  assert(layout_.v == kernels::VType::kF16);
  return reinterpret_cast<const uint16_t*>(VData(blocks_[block], layer, head));
}

int32_t KvPool::QuantizedRows(int32_t written) { return written / kGroup * kGroup; }

int KvPool::blocks_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t KvPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layers_in_use_ * layer_bytes_;
}

size_t KvPool::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_layers_in_use_ * layer_bytes_;
}

size_t KvPool::staging_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Block& b : blocks_) {
    if (b.staging) n += staging_elems_ * sizeof(uint16_t);
  }
  return n;
}

KvPool::LayerData KvPool::TakeLayerStorage() {
  if (spare_layers_.empty()) {
    if (chunks_ != nullptr) return chunks_->Take();
    // Not value-initialized: rows are written before they are read (views only cover rows
    // that hold data), and touching fresh pages here would cost more than the writes.
    return LayerData(new uint8_t[layer_bytes_]);
  }
  LayerData d = std::move(spare_layers_.back());
  spare_layers_.pop_back();
  return d;
}

bool KvPool::has_all_layers(int32_t block) const {
  const Block& b = blocks_[block];
  return std::all_of(b.layers.begin(), b.layers.end(), [](const LayerData& d) { return !!d; });
}

void KvPool::MaybeFreeStaging(Block& b) const {
  if (!b.staging || geo_.block_rows % kGroup != 0) return;
  for (int l = 0; l < geo_.n_layers; ++l) {
    if (b.layers[l] && b.written[l] != geo_.block_rows) return;
  }
  b.staging.reset();  // every row of every live layer is in a whole group
}

Result<int32_t> KvPool::Allocate() {
  std::lock_guard<std::mutex> lock(mu_);
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
    blocks_[id].layers.resize(geo_.n_layers);
    blocks_[id].rotated_pos.resize(geo_.block_rows);
  }
  Block& b = blocks_[id];
  for (LayerData& d : b.layers) {
    if (!d) d = TakeLayerStorage();
  }
  b.used = true;
  std::fill(b.rotated_pos.begin(), b.rotated_pos.end(), kNoPosition);
  b.written.assign(geo_.n_layers, 0);
  ++in_use_;
  layers_in_use_ += geo_.n_layers;
  peak_layers_in_use_ = std::max(peak_layers_in_use_, layers_in_use_);
  return id;
}

void KvPool::Free(int32_t block) {
  std::lock_guard<std::mutex> lock(mu_);
  assert(block >= 0 && block < static_cast<int32_t>(blocks_.size()) && blocks_[block].used);
  Block& b = blocks_[block];
  for (const LayerData& d : b.layers) layers_in_use_ -= d ? 1 : 0;
  b.used = false;
  b.staging.reset();
  free_.push_back(block);
  --in_use_;
}

void KvPool::ReleaseLayer(int32_t block, int layer) {
  std::lock_guard<std::mutex> lock(mu_);
  Block& b = blocks_[block];
  assert(b.used && layer >= 0 && layer < geo_.n_layers);
  if (!b.layers[layer]) return;
  spare_layers_.push_back(std::move(b.layers[layer]));
  b.written[layer] = 0;
  --layers_in_use_;
  MaybeFreeStaging(b);
}

KvPool::RawLayer KvPool::raw_layer(int32_t block, int layer) const {
  const Block& b = blocks_[block];
  assert(b.used && layer >= 0 && layer < geo_.n_layers);
  RawLayer raw;
  if (!b.layers[layer]) return raw;
  raw.data = {b.layers[layer].get(), layer_bytes_};
  if (kivi() && QuantizedRows(b.written[layer]) < b.written[layer]) {
    raw.staging = {Staging(b, layer, 0), static_cast<size_t>(geo_.n_kv_heads) * kGroup *
                                             geo_.head_dim_k};
  }
  return raw;
}

Status KvPool::LoadLayer(int32_t block, int layer, std::span<const uint8_t> data,
                         std::span<const uint16_t> staging, int32_t n_rows) {
  KVMEM_RETURN_IF_ERROR(CheckLoad(n_rows, staging.size()));
  if (data.size() != layer_bytes_) {
    return InvalidArgument("KV layer data of " + std::to_string(data.size()) +
                           " bytes, expected " + std::to_string(layer_bytes_));
  }
  const std::span<uint8_t> storage = LoadLayerStorage(block, layer);
  std::copy(data.begin(), data.end(), storage.begin());
  return CommitLoadedLayer(block, layer, staging, n_rows);
}

std::span<uint8_t> KvPool::LoadLayerStorage(int32_t block, int layer) {
  Block& b = blocks_[block];
  assert(b.used && layer >= 0 && layer < geo_.n_layers);
  if (!b.layers[layer]) {
    std::lock_guard<std::mutex> lock(mu_);
    b.layers[layer] = TakeLayerStorage();
    ++layers_in_use_;
    peak_layers_in_use_ = std::max(peak_layers_in_use_, layers_in_use_);
  }
  return {b.layers[layer].get(), layer_bytes_};
}

Status KvPool::CommitLoadedLayer(int32_t block, int layer, std::span<const uint16_t> staging,
                                 int32_t n_rows) {
  Block& b = blocks_[block];
  assert(b.used && layer >= 0 && layer < geo_.n_layers && b.layers[layer]);
  KVMEM_RETURN_IF_ERROR(CheckLoad(n_rows, staging.size()));
  if (kivi() && QuantizedRows(n_rows) < n_rows) {
    if (!b.staging) b.staging.reset(new uint16_t[staging_elems_]);
    std::copy(staging.begin(), staging.end(), Staging(b, layer, 0));
  }
  b.written[layer] = n_rows;
  MaybeFreeStaging(b);
  return Status::Ok();
}

Status KvPool::CheckLoad(int32_t n_rows, size_t staging_size) const {
  if (n_rows < 0 || n_rows > geo_.block_rows) {
    return InvalidArgument("KV layer of " + std::to_string(n_rows) + " rows in a block of " +
                           std::to_string(geo_.block_rows));
  }
  const bool needs_staging = kivi() && QuantizedRows(n_rows) < n_rows;
  const size_t want =
      needs_staging ? static_cast<size_t>(geo_.n_kv_heads) * kGroup * geo_.head_dim_k : 0;
  if (staging_size != want) {
    return InvalidArgument("KV layer staging of " + std::to_string(staging_size) +
                           " values, expected " + std::to_string(want));
  }
  return Status::Ok();
}

void KvPool::UnquantizeGroupPrefix(Block& b, int layer, int32_t row) {
  if (!b.staging) b.staging.reset(new uint16_t[staging_elems_]);
  const int hk = geo_.head_dim_k;
  const int32_t g = row / kGroup;
  std::vector<float> tmp(static_cast<size_t>(kGroup) * hk);
  const size_t group_bytes = kernels::KiviGroupBytes(hk);
  for (int h = 0; h < geo_.n_kv_heads; ++h) {
    kernels::DequantizeKiviGroup(KData(b, layer, h) + g * group_bytes, hk, tmp.data());
    uint16_t* st = Staging(b, layer, h);
    for (size_t i = 0; i < static_cast<size_t>(row % kGroup) * hk; ++i) st[i] = F32ToF16(tmp[i]);
  }
}

void KvPool::RewriteQuantizedRow(Block& b, int layer, int32_t row, const float* k) {
  const int hk = geo_.head_dim_k;
  std::vector<float> tmp(static_cast<size_t>(kGroup) * hk);
  const size_t group_bytes = kernels::KiviGroupBytes(hk);
  float* dst = &tmp[static_cast<size_t>(row % kGroup) * hk];
  for (int h = 0; h < geo_.n_kv_heads; ++h) {
    uint8_t* group = KData(b, layer, h) + (row / kGroup) * group_bytes;
    kernels::DequantizeKiviGroup(group, hk, tmp.data());
    // Through f16, as a staged row would be.
    for (int d = 0; d < hk; ++d) dst[d] = F16ToF32(F32ToF16(k[h * hk + d]));
    kernels::QuantizeKiviGroup(tmp.data(), hk, group);
  }
}

void KvPool::DropRows(int32_t block, int32_t first_row) {
  Block& b = blocks_[block];
  assert(b.used && first_row >= 0 && first_row <= geo_.block_rows);
  for (int l = 0; l < geo_.n_layers; ++l) {
    int32_t& written = b.written[l];
    if (written <= first_row) continue;
    if (kivi()) {
      // A whole group cut open: its kept rows go back to staging.
      if (first_row % kGroup != 0 && first_row < QuantizedRows(written)) {
        UnquantizeGroupPrefix(b, l, first_row);
      }
    }
    written = first_row;
  }
}

void KvPool::WriteToken(RowRef r, int layer, const float* k, const float* v) {
  Block& b = blocks_[r.block];
  assert(b.used && layer >= 0 && layer < geo_.n_layers && r.row >= 0 && r.row < geo_.block_rows);
  const int hk = geo_.head_dim_k, hv = geo_.head_dim_v;
  int32_t& written = b.written[layer];
  if (kivi()) {
    assert(r.row <= written && "kivi4 K rows of a block are written without gaps");
    if (r.row < QuantizedRows(written)) {
      RewriteQuantizedRow(b, layer, r.row, k);
    } else {
      if (!b.staging) b.staging.reset(new uint16_t[staging_elems_]);
      const int g_row = r.row % kGroup;
      for (int h = 0; h < geo_.n_kv_heads; ++h) {
        uint16_t* st = Staging(b, layer, h) + static_cast<size_t>(g_row) * hk;
        for (int d = 0; d < hk; ++d) st[d] = F32ToF16(k[h * hk + d]);
      }
      if (r.row == written && g_row == kGroup - 1) {
        // The group is whole: quantize it from its f16 rows.
        std::vector<float> tmp(static_cast<size_t>(kGroup) * hk);
        const size_t group_bytes = kernels::KiviGroupBytes(hk);
        for (int h = 0; h < geo_.n_kv_heads; ++h) {
          const uint16_t* st = Staging(b, layer, h);
          for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = F16ToF32(st[i]);
          kernels::QuantizeKiviGroup(tmp.data(), hk,
                                     KData(b, layer, h) + (r.row / kGroup) * group_bytes);
        }
      }
    }
  } else {
    for (int h = 0; h < geo_.n_kv_heads; ++h) {
      k_traits_->from_float(k + h * hk, KData(b, layer, h) + r.row * k_row_bytes_, hk);
    }
  }
  for (int h = 0; h < geo_.n_kv_heads; ++h) {
    v_traits_->from_float(v + h * hv, VData(b, layer, h) + r.row * v_row_bytes_, hv);
  }
  if (r.row < written) return;  // an overwrite
  written = r.row + 1;
  if (kivi() && written == geo_.block_rows) MaybeFreeStaging(b);
}

void KvPool::ReadToken(RowRef r, int layer, float* k, float* v) const {
  const Block& b = blocks_[r.block];
  assert(b.used && r.row < b.written[layer]);
  const int hk = geo_.head_dim_k, hv = geo_.head_dim_v;
  if (kivi()) {
    const bool quantized = r.row < QuantizedRows(b.written[layer]);
    const size_t group_bytes = kernels::KiviGroupBytes(hk);
    for (int h = 0; h < geo_.n_kv_heads; ++h) {
      if (quantized) {
        kernels::DequantizeKiviRow(KData(b, layer, h) + (r.row / kGroup) * group_bytes, hk,
                                   r.row % kGroup, k + h * hk);
      } else {
        const uint16_t* st = Staging(b, layer, h) + static_cast<size_t>(r.row % kGroup) * hk;
        for (int d = 0; d < hk; ++d) k[h * hk + d] = F16ToF32(st[d]);
      }
    }
  } else {
    const kernels::TypeTraits* kt = k_traits_;
    for (int h = 0; h < geo_.n_kv_heads; ++h) {
      kt->to_float(KData(b, layer, h) + r.row * k_row_bytes_, k + h * hk, hk);
    }
  }
  const kernels::TypeTraits* vt = v_traits_;
  for (int h = 0; h < geo_.n_kv_heads; ++h) {
    vt->to_float(VData(b, layer, h) + r.row * v_row_bytes_, v + h * hv, hv);
  }
}

kernels::KvSpan KvPool::Span(int32_t block, int layer, int head, int32_t first_row,
                             int32_t n_rows) const {
  const Block& b = blocks_[block];
  assert(b.used && first_row >= 0 && n_rows >= 0 && first_row + n_rows <= b.written[layer]);
  kernels::KvSpan s;
  s.n_rows = n_rows;
  s.v = VData(b, layer, head) + first_row * v_row_bytes_;
  s.v_stride = static_cast<int64_t>(v_row_bytes_);
  if (!kivi()) {
    s.k = KData(b, layer, head) + first_row * k_row_bytes_;
    s.k_stride = static_cast<int64_t>(k_row_bytes_);
    return s;
  }
  const int32_t quantized = QuantizedRows(b.written[layer]);
  const size_t group_bytes = kernels::KiviGroupBytes(geo_.head_dim_k);
  s.k = KData(b, layer, head) + (first_row / kGroup) * group_bytes;
  s.k_stride = static_cast<int64_t>(group_bytes);
  s.k_group_row = first_row % kGroup;
  s.k_quantized_rows = std::clamp<int64_t>(quantized - first_row, 0, n_rows);
  if (first_row + n_rows > quantized) {
    s.k_staging = Staging(b, layer, head) +
                  static_cast<size_t>(std::max(first_row, quantized) - quantized) * geo_.head_dim_k;
  }
  return s;
}

void KvPool::Attend(const float* q, const kernels::KvSpan* spans, int n_spans, float scale,
                    float* out, float sink) const {
  kernels::Attend(q, layout_, spans, n_spans, scale, out, kernels::ActiveIsa(), sink);
}

void KvPool::AttentionWeights(const float* q, const kernels::KvSpan* spans, int n_spans,
                              float scale, float* weights) const {
  kernels::AttentionWeights(q, layout_, spans, n_spans, scale, weights);
}

void KvPool::RepositionLayer(Block& b, int layer, int32_t first_row,
                             const std::vector<int64_t>& delta, const RopeSpec& rope) {
  const int hk = geo_.head_dim_k, heads = geo_.n_kv_heads;
  const int32_t written = b.written[layer];
  const int32_t n = static_cast<int32_t>(delta.size());
  DeltaRotator rot(rope, hk);
  if (!kivi()) {
    const kernels::TypeTraits* kt = k_traits_;
    std::vector<float> tmp(static_cast<size_t>(heads) * hk);  // (n_kv_heads, head_dim_k)
    for (int32_t i = 0; i < n && first_row + i < written; ++i) {
      if (delta[i] == 0) continue;
      const size_t off = static_cast<size_t>(first_row + i) * k_row_bytes_;
      for (int h = 0; h < heads; ++h) kt->to_float(KData(b, layer, h) + off, &tmp[h * hk], hk);
      // Rotations compose: R(target) = R(target - old) R(old).
      rot.Rotate(tmp.data(), heads, delta[i]);
      for (int h = 0; h < heads; ++h) kt->from_float(&tmp[h * hk], KData(b, layer, h) + off, hk);
    }
    return;
  }
  const int32_t quantized = QuantizedRows(written);
  const size_t group_bytes = kernels::KiviGroupBytes(hk);
  std::vector<float> tmp(static_cast<size_t>(kGroup) * hk);  // (32, head_dim_k)
  for (int h = 0; h < heads; ++h) {
    for (int32_t i = 0; i < n && first_row + i < written;) {
      const int32_t row = first_row + i;
      if (row >= quantized) {  // staged: rotate in f16
        if (delta[i] != 0) {
          uint16_t* st = Staging(b, layer, h) + static_cast<size_t>(row % kGroup) * hk;
          for (int d = 0; d < hk; ++d) tmp[d] = F16ToF32(st[d]);
          rot.Rotate(tmp.data(), 1, delta[i]);
          for (int d = 0; d < hk; ++d) st[d] = F32ToF16(tmp[d]);
        }
        ++i;
        continue;
      }
      // A whole group: dequantize, rotate the moved rows, requantize.
      const int32_t g = row / kGroup;
      const int32_t end = std::min(n, (g + 1) * kGroup - first_row);
      if (std::any_of(delta.begin() + i, delta.begin() + end, [](int64_t d) { return d != 0; })) {
        uint8_t* group = KData(b, layer, h) + g * group_bytes;
        kernels::DequantizeKiviGroup(group, hk, tmp.data());
        for (int32_t j = i; j < end; ++j) {
          if (delta[j] != 0) {
            rot.Rotate(&tmp[static_cast<size_t>(first_row + j - g * kGroup) * hk], 1, delta[j]);
          }
        }
        kernels::QuantizeKiviGroup(tmp.data(), hk, group);
      }
      i = end;
    }
  }
}

void KvPool::Reposition(RowRef first, int n, int64_t new_pos, const std::vector<RopeSpec>& rope) {
  assert(static_cast<int>(rope.size()) == geo_.n_layers);
  assert(first.row >= 0 && n >= 0 && first.row + n <= geo_.block_rows);
  Block& b = blocks_[first.block];
  std::vector<int64_t> delta(n, 0);
  bool moved = false;
  for (int i = 0; i < n; ++i) {
    const int64_t old_pos = b.rotated_pos[first.row + i];
    if (old_pos == kNoPosition) continue;
    delta[i] = new_pos + i - old_pos;
    moved |= delta[i] != 0;
  }
  if (!moved) return;
  for (int l = 0; l < geo_.n_layers; ++l) {
    if (b.layers[l]) RepositionLayer(b, l, first.row, delta, rope[l]);
  }
  for (int i = 0; i < n; ++i) {
    if (b.rotated_pos[first.row + i] != kNoPosition) b.rotated_pos[first.row + i] = new_pos + i;
  }
}

}  // namespace kvmem::kv
