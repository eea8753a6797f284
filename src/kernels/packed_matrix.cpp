#include "kernels/packed_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/fp16.h"
#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_k_scales.h"
#include "kernels/type_traits.h"

namespace kvmem::kernels {
namespace {

// One source row as integer codes with a scale and a min per sub-block: x = scale * q + min.
struct DecodedRow {
  std::vector<int8_t> codes;  // (n_in)
  std::vector<float> scales;  // (n_in / block)
  std::vector<float> mins;    // (n_in / block); zero for kS8
};

struct Format {
  PackedKind kind;
  int block;
};

Format FormatOf(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
      return {PackedKind::kU4, 32};
    case DType::kQ6_K:
      return {PackedKind::kS8, 16};
    default:  // Q8_0, Q5_0, MXFP4
      return {PackedKind::kS8, 32};
  }
}

// Element j of a 32-element block whose low nibbles hold elements 0..15 and high 16..31.
inline int Nibble(const uint8_t* qs, int j) { return (qs[j % 16] >> (4 * (j / 16))) & 15; }

// Codes too unless scales_only (the scales and mins suffice to choose their storage).
void DecodeRow(DType type, const uint8_t* row, int64_t n, DecodedRow* out, bool scales_only) {
  int8_t* q = out->codes.data();
  float* sc = out->scales.data();
  float* mn = out->mins.data();
  switch (type) {
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, q += 32) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
        if (!scales_only) {
          for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(blk.qs, j));
        }
        sc[b] = F16ToF32(blk.d);
        mn[b] = -8.0f * sc[b];
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b, q += 32) {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
        if (!scales_only) {
          for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(blk.qs, j));
        }
        sc[b] = F16ToF32(blk.d);
        mn[b] = F16ToF32(blk.m);
      }
      return;
    case DType::kQ4_K:
      for (int64_t s = 0; s < n / kQK_K; ++s) {
        const auto& blk = reinterpret_cast<const BlockQ4_K*>(row)[s];
        const KScalesMins sm = UnpackK4ScalesMins(blk.scales);
        const float d = F16ToF32(blk.d), dmin = F16ToF32(blk.dmin);
        for (int g = 0; g < 8; ++g, q += 32) {
          const uint8_t* qs = blk.qs + 32 * (g / 2);
          for (int j = 0; j < 32 && !scales_only; ++j) {
            q[j] = static_cast<int8_t>((qs[j] >> (4 * (g % 2))) & 15);
          }
          sc[8 * s + g] = d * static_cast<float>(sm.scales[g]);
          mn[8 * s + g] = -(dmin * static_cast<float>(sm.mins[g]));
        }
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, q += 32) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
        if (!scales_only) std::memcpy(q, blk.qs, 32);
        sc[b] = F16ToF32(blk.d);
        mn[b] = 0.0f;
      }
      return;
    case DType::kQ5_0:
      for (int64_t b = 0; b < n / 32; ++b, q += 32) {
        const auto& blk = reinterpret_cast<const BlockQ5_0*>(row)[b];
        uint32_t qh;
        std::memcpy(&qh, blk.qh, 4);
        for (int j = 0; j < 32 && !scales_only; ++j) {
          q[j] = static_cast<int8_t>((Nibble(blk.qs, j) | (((qh >> j) & 1) << 4)) - 16);
        }
        sc[b] = F16ToF32(blk.d);
        mn[b] = 0.0f;
      }
      return;
    case DType::kMxfp4:  // the value table's int8 codes and the block's power-of-two scale
      for (int64_t b = 0; b < n / 32; ++b, q += 32) {
        const auto& blk = reinterpret_cast<const BlockMxfp4*>(row)[b];
        for (int j = 0; j < 32 && !scales_only; ++j) q[j] = kMxfp4Values[Nibble(blk.qs, j)];
        sc[b] = std::ldexp(1.0f, static_cast<int>(blk.e) - 128);
        mn[b] = 0.0f;
      }
      return;
    case DType::kQ6_K:
      for (int64_t s = 0; s < n / kQK_K; ++s, q += kQK_K) {
        const auto& blk = reinterpret_cast<const BlockQ6_K*>(row)[s];
        if (!scales_only) DecodeQ6K(blk, q);
        const float d = F16ToF32(blk.d);
        for (int g = 0; g < 16; ++g) {
          sc[16 * s + g] = d * static_cast<float>(blk.scales[g]);
          mn[16 * s + g] = 0.0f;
        }
      }
      return;
    default:
      std::abort();  // CanPack() was checked
  }
}

bool ExactInF16(float v) { return F16ToF32(F32ToF16(v)) == v; }

void PutScale(uint8_t* dst, int r, float v, bool f16) {
  if (f16) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(dst + 2 * r, &h, 2);
  } else {
    std::memcpy(dst + 4 * r, &v, 4);
  }
}

float GetScale(const uint8_t* src, int r, bool f16) {
  if (f16) {
    uint16_t h;
    std::memcpy(&h, src + 2 * r, 2);
    return F16ToF32(h);
  }
  float v;
  std::memcpy(&v, src + 4 * r, 4);
  return v;
}

// Writes one row's codes into its 4-byte slots of a tile's chunks.
void PutCodes(PackedKind kind, int block, const int8_t* q, int r, uint8_t* tile) {
  if (kind == PackedKind::kU4) {
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 4; ++j) {
        tile[64 * c + 4 * r + j] = static_cast<uint8_t>(q[4 * c + j] | (q[16 + 4 * c + j] << 4));
      }
    }
    return;
  }
  for (int c = 0; c < block / 4; ++c) std::memcpy(tile + 64 * c + 4 * r, q + 4 * c, 4);
}

}  // namespace

void PackedMatrix::Free::operator()(uint8_t* p) const { std::free(p); }

bool CanPack(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kQ6_K:
    case DType::kMxfp4:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<PackedMatrix> Pack(const WeightMatrix& w, const SourceDone& done) {
  if (!CanPack(w.type) || w.n_out <= 0 || w.n_in <= 0) return nullptr;
  const Format f = FormatOf(w.type);
  const int64_t n_sub = w.n_in / f.block;
  const auto* src = static_cast<const uint8_t*>(w.data);

  // Rows [r0, r) are read for the last time in this pass.
  const int64_t chunk_rows =
      std::max<int64_t>(1, (int64_t{4} << 20) / static_cast<int64_t>(w.row_bytes));
  auto source_done = [&](int64_t r0, int64_t r) {
    if (done && (r - r0 == chunk_rows || r == w.n_out)) {
      done(src + r0 * w.row_bytes, static_cast<size_t>(r - r0) * w.row_bytes);
      return r;
    }
    return r0;
  };

  // fp16 scales only if every scale and min of the matrix survives the round trip.
  DecodedRow row{std::vector<int8_t>(w.n_in), std::vector<float>(n_sub), std::vector<float>(n_sub)};
  bool f16 = true;
  for (int64_t r = 0, r0 = 0; r < w.n_out && f16;) {
    DecodeRow(w.type, src + r * w.row_bytes, w.n_in, &row, /*scales_only=*/true);
    for (int64_t b = 0; b < n_sub && f16; ++b) {
      f16 = ExactInF16(row.scales[b]) && ExactInF16(row.mins[b]);
    }
    r0 = source_done(r0, ++r);
  }

  auto m = std::unique_ptr<PackedMatrix>(new PackedMatrix());
  m->kind_ = f.kind;
  m->block_ = f.block;
  m->f16_scales_ = f16;
  m->n_in_ = w.n_in;
  m->n_out_ = w.n_out;
  m->act_type_ = GetTypeTraits(w.type, Isa::kScalar)->vec_dot_type;
  const size_t code_bytes =
      static_cast<size_t>(kPackRows) * (f.kind == PackedKind::kU4 ? 16 : f.block);
  const size_t scale_bytes = static_cast<size_t>(kPackRows) * (f16 ? 2 : 4);
  const size_t extra_bytes = f.kind == PackedKind::kU4 ? scale_bytes : kPackRows * 2;
  m->tile_bytes_ = (code_bytes + scale_bytes + extra_bytes + 63) / 64 * 64;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, m->bytes()));
  if (data == nullptr) throw std::bad_alloc();
  m->data_.reset(data);
  std::memset(data, 0, m->bytes());

  for (int64_t r = 0, r0 = 0; r < w.n_out; r0 = source_done(r0, ++r)) {
    DecodeRow(w.type, src + r * w.row_bytes, w.n_in, &row, /*scales_only=*/false);
    uint8_t* group = data + (r / kPackRows) * m->group_bytes();
    const int lane = static_cast<int>(r % kPackRows);
    for (int64_t b = 0; b < n_sub; ++b) {
      uint8_t* tile = group + b * m->tile_bytes_;
      const int8_t* q = row.codes.data() + b * f.block;
      PutCodes(f.kind, f.block, q, lane, tile);
      PutScale(tile + code_bytes, lane, row.scales[b], f16);
      if (f.kind == PackedKind::kU4) {
        PutScale(tile + code_bytes + scale_bytes, lane, row.mins[b], f16);
      } else {
        int sum = 0;
        for (int j = 0; j < f.block; ++j) sum += q[j];
        const auto s16 = static_cast<int16_t>(sum);
        std::memcpy(tile + code_bytes + scale_bytes + 2 * lane, &s16, 2);
      }
    }
  }
  return m;
}

void PackedMatrix::DequantizeRow(int64_t r, float* out) const {
  const int lane = static_cast<int>(r % kPackRows);
  const uint8_t* g = group(r / kPackRows);
  const size_t code_bytes =
      static_cast<size_t>(kPackRows) * (kind_ == PackedKind::kU4 ? 16 : block_);
  const size_t scale_bytes = static_cast<size_t>(kPackRows) * (f16_scales_ ? 2 : 4);
  for (int64_t b = 0; b < n_in_ / block_; ++b, out += block_) {
    const uint8_t* tile = g + b * tile_bytes_;
    const float scale = GetScale(tile + code_bytes, lane, f16_scales_);
    if (kind_ == PackedKind::kU4) {
      const float min = GetScale(tile + code_bytes + scale_bytes, lane, f16_scales_);
      for (int c = 0; c < 4; ++c) {
        for (int j = 0; j < 4; ++j) {
          const uint8_t byte = tile[64 * c + 4 * lane + j];
          out[4 * c + j] = scale * static_cast<float>(byte & 15) + min;
          out[16 + 4 * c + j] = scale * static_cast<float>(byte >> 4) + min;
        }
      }
    } else {
      for (int c = 0; c < block_ / 4; ++c) {
        for (int j = 0; j < 4; ++j) {
          out[4 * c + j] =
              scale * static_cast<float>(static_cast<int8_t>(tile[64 * c + 4 * lane + j]));
        }
      }
    }
  }
}

}  // namespace kvmem::kernels
