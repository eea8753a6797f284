// KIVI key groups (kivi.h). Quantization runs once per kKiviGroupRows rows written, and
// dequantization only on re-positioning and read-back, so both are plain C++.
#include "kernels/kivi.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace kvmem::kernels {
namespace {

constexpr int kChunk = 32;
constexpr int kHalfChunk = kChunk / 2;

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Code of channel c in a row's packed codes.
inline int Code(const uint8_t* row_codes, int c) {
  const uint8_t byte = row_codes[(c / kChunk) * kHalfChunk + c % kHalfChunk];
  return (c % kChunk) < kHalfChunk ? (byte & 0x0F) : (byte >> 4);
}

}  // namespace

size_t KiviGroupBytes(int head_dim) {
  return KiviCodesOffset(head_dim) + static_cast<size_t>(kKiviGroupRows) * head_dim / 2;
}

void QuantizeKiviGroup(const float* x, int head_dim, void* group) {
  assert(head_dim % kChunk == 0);
  auto* g = static_cast<uint8_t*>(group);
  uint8_t* codes = g + KiviCodesOffset(head_dim);
  std::memset(codes, 0, static_cast<size_t>(kKiviGroupRows) * head_dim / 2);
  const size_t row_bytes = static_cast<size_t>(head_dim) / 2;
  for (int c = 0; c < head_dim; ++c) {
    float lo = x[c], hi = x[c];
    for (int r = 1; r < kKiviGroupRows; ++r) {
      lo = std::min(lo, x[static_cast<size_t>(r) * head_dim + c]);
      hi = std::max(hi, x[static_cast<size_t>(r) * head_dim + c]);
    }
    const uint16_t d16 = F32ToF16((hi - lo) / 15.0f);
    const uint16_t m16 = F32ToF16(lo);
    StoreU16(g + 2 * c, d16);
    StoreU16(g + KiviMinsOffset(head_dim) + 2 * c, m16);
    // Codes against the values the reader will use, so rounding of d and m is not doubled.
    const float d = F16ToF32(d16), m = F16ToF32(m16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const size_t byte = static_cast<size_t>(c / kChunk) * kHalfChunk + c % kHalfChunk;
    const int shift = (c % kChunk) < kHalfChunk ? 0 : 4;
    for (int r = 0; r < kKiviGroupRows; ++r) {
      const float t = std::nearbyint((x[static_cast<size_t>(r) * head_dim + c] - m) * id);
      // NaN compares false both ways and becomes 0.
      const int code = t >= 15.0f ? 15 : (t > 0.0f ? static_cast<int>(t) : 0);
      codes[r * row_bytes + byte] |= static_cast<uint8_t>(code << shift);
    }
  }
}

void DequantizeKiviRow(const void* group, int head_dim, int row, float* x) {
  const auto* g = static_cast<const uint8_t*>(group);
  const uint8_t* codes = g + KiviCodesOffset(head_dim) + static_cast<size_t>(row) * head_dim / 2;
  for (int c = 0; c < head_dim; ++c) {
    const float d = F16ToF32(LoadU16(g + 2 * c));
    const float m = F16ToF32(LoadU16(g + KiviMinsOffset(head_dim) + 2 * c));
    x[c] = d * static_cast<float>(Code(codes, c)) + m;
  }
}

void DequantizeKiviGroup(const void* group, int head_dim, float* x) {
  for (int r = 0; r < kKiviGroupRows; ++r) {
    DequantizeKiviRow(group, head_dim, r, x + static_cast<size_t>(r) * head_dim);
  }
}

}  // namespace kvmem::kernels
