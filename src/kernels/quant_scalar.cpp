// Scalar reference kernels for the float types and ggml's 32-element formats (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q8_1). Quantizers reproduce ggml-quants.c's quantize_row_*_ref byte for byte;
// dequantizers reproduce dequantize_row_* bit for bit (one multiply, then one add, never fused:
// this file is built without FMA and C++20 without GNU extensions does not contract); dot
// products sum integers per block and scale once per block, as ggml's *_generic do.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"

namespace kvmem::kernels::scalar {
namespace {

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint32_t LoadQh(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// ggml converts with (int8_t)(v) then MIN(hi, .): truncation toward zero. This is the same for
// every v ggml can produce from finite input and is defined (0) for NaN and out-of-range values.
inline int TruncClamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// roundf (half away from zero) into int8, as quantize_row_q8_0_ref's implicit conversion.
inline int8_t RoundToI8(float v) {
  const float r = std::round(v);
  if (!(r > -128.0f)) return r == r ? -128 : 0;
  if (r > 127.0f) return 127;
  return static_cast<int8_t>(r);
}

// The signed value of largest magnitude (the first one on ties), as ggml's Q4_0/Q5_0 quantizers.
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

inline float AbsMax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

inline void MinMax(const float* x, int n, float* min, float* max) {
  *min = 3.402823466e+38f;
  *max = -3.402823466e+38f;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

constexpr int kHalf = 16;  // a 32-element block packs elements j and j + 16 into one byte

}  // namespace

// ---- Float types ------------------------------------------------------------------------------

void ToFloatF32(const void* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void FromFloatF32(const float* src, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// ggml's scalar vec_dot_f32 sums float products in double. Rows are read bytewise (like every
// other type's) so they may sit at any address.
float VecDotF32(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint8_t*>(x);
  const auto* b = static_cast<const uint8_t*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(LoadF32(a + 4 * i) * LoadF32(b + 4 * i));
  return static_cast<float>(sum);
}

void ToFloatF16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(p + 2 * i));
}

void FromFloatF16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

float VecDotF16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint8_t*>(x);
  const auto* b = static_cast<const uint8_t*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(F16ToF32(LoadU16(a + 2 * i)) * F16ToF32(LoadU16(b + 2 * i)));
  }
  return static_cast<float>(sum);
}

void ToFloatBF16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(LoadU16(p + 2 * i));
}

void FromFloatBF16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToBF16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

float VecDotBF16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint8_t*>(x);
  const auto* b = static_cast<const uint8_t*>(y);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(BF16ToF32(LoadU16(a + 2 * i)) * BF16ToF32(LoadU16(b + 2 * i)));
  }
  return static_cast<float>(sum);
}

// ---- Q4_0 -------------------------------------------------------------------------------------

void ToFloatQ4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const BlockQ4_0& b = blocks[i];
    const float d = F16ToF32(b.d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      dst[j + kHalf] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

// quantize_row_q4_0_ref: d = -max/8 so the largest-magnitude value maps to code 0 exactly;
// codes are trunc(x/d + 8.5) capped at 15.
void FromFloatQ4_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    BlockQ4_0& b = blocks[i];
    const float d = SignedAbsMax(src, kQK4_0) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = TruncClamp(src[j] * id + 8.5f, 15);
      const int q1 = TruncClamp(src[j + kHalf] * id + 8.5f, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

float VecDotQ4_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += ((xb[i].qs[j] & 0x0F) - 8) * yb[i].qs[j];
      sumi += ((xb[i].qs[j] >> 4) - 8) * yb[i].qs[j + kHalf];
    }
    sum += static_cast<float>(sumi) * F16ToF32(xb[i].d) * F16ToF32(yb[i].d);
  }
  return sum;
}

// ---- Q4_1 -------------------------------------------------------------------------------------

void ToFloatQ4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK4_1; ++i, dst += kQK4_1) {
    const BlockQ4_1& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float m = F16ToF32(b.m);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
      dst[j + kHalf] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

// quantize_row_q4_1_ref: d = (max - min) / 15, m = min, codes trunc((x - min)/d + 0.5).
void FromFloatQ4_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQK4_1; ++i, src += kQK4_1) {
    BlockQ4_1& b = blocks[i];
    float min, max;
    MinMax(src, kQK4_1, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    b.m = F32ToF16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = TruncClamp((src[j] - min) * id + 0.5f, 15);
      const int q1 = TruncClamp((src[j + kHalf] - min) * id + 0.5f, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

float VecDotQ4_1Q8_1(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_1*>(x);
  const auto* yb = static_cast<const BlockQ8_1*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    int sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += (xb[i].qs[j] & 0x0F) * yb[i].qs[j];
      sumi += (xb[i].qs[j] >> 4) * yb[i].qs[j + kHalf];
    }
    sum += (F16ToF32(xb[i].d) * F16ToF32(yb[i].d)) * static_cast<float>(sumi) +
           F16ToF32(xb[i].m) * F16ToF32(yb[i].s);
  }
  return sum;
}

// ---- Q5_0 / Q5_1 ------------------------------------------------------------------------------

namespace {
// The 5-bit code of element j (0..31) of a Q5 block.
inline int Q5Code(const uint8_t qs[16], uint32_t qh, int j) {
  const int nibble = j < kHalf ? (qs[j] & 0x0F) : (qs[j - kHalf] >> 4);
  return nibble | static_cast<int>(((qh >> j) & 1u) << 4);
}

inline void PackQ5(const int q[32], uint8_t qs[16], uint8_t qh_out[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kHalf] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  std::memcpy(qh_out, &qh, 4);
}
}  // namespace

void ToFloatQ5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK5_0; ++i, dst += kQK5_0) {
    const BlockQ5_0& b = blocks[i];
    const float d = F16ToF32(b.d);
    const uint32_t qh = LoadQh(b.qh);
    for (int j = 0; j < kQK5_0; ++j) dst[j] = static_cast<float>(Q5Code(b.qs, qh, j) - 16) * d;
  }
}

// quantize_row_q5_0_ref: as Q4_0 with d = -max/16, codes trunc(x/d + 16.5) capped at 31.
void FromFloatQ5_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQK5_0; ++i, src += kQK5_0) {
    BlockQ5_0& b = blocks[i];
    const float d = SignedAbsMax(src, kQK5_0) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    int q[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j) q[j] = TruncClamp(src[j] * id + 16.5f, 31);
    PackQ5(q, b.qs, b.qh);
  }
}

float VecDotQ5_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const uint32_t qh = LoadQh(xb[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK5_0; ++j) sumi += (Q5Code(xb[i].qs, qh, j) - 16) * yb[i].qs[j];
    sum += (F16ToF32(xb[i].d) * F16ToF32(yb[i].d)) * static_cast<float>(sumi);
  }
  return sum;
}

void ToFloatQ5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK5_0; ++i, dst += kQK5_0) {
    const BlockQ5_1& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float m = F16ToF32(b.m);
    const uint32_t qh = LoadQh(b.qh);
    for (int j = 0; j < kQK5_0; ++j) dst[j] = static_cast<float>(Q5Code(b.qs, qh, j)) * d + m;
  }
}

// quantize_row_q5_1_ref: as Q4_1 with 31 steps. (ggml does not cap the code at 31 here; it
// cannot exceed 31 for finite input.)
void FromFloatQ5_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQK5_0; ++i, src += kQK5_0) {
    BlockQ5_1& b = blocks[i];
    float min, max;
    MinMax(src, kQK5_0, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    b.m = F32ToF16(min);
    int q[kQK5_0];
    for (int j = 0; j < kQK5_0; ++j) q[j] = TruncClamp((src[j] - min) * id + 0.5f, 31);
    PackQ5(q, b.qs, b.qh);
  }
}

float VecDotQ5_1Q8_1(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_1*>(x);
  const auto* yb = static_cast<const BlockQ8_1*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const uint32_t qh = LoadQh(xb[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK5_0; ++j) sumi += Q5Code(xb[i].qs, qh, j) * yb[i].qs[j];
    sum += (F16ToF32(xb[i].d) * F16ToF32(yb[i].d)) * static_cast<float>(sumi) +
           F16ToF32(xb[i].m) * F16ToF32(yb[i].s);
  }
  return sum;
}

// ---- Q8_0 / Q8_1 ------------------------------------------------------------------------------

void ToFloatQ8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const float d = F16ToF32(blocks[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(blocks[i].qs[j]) * d;
  }
}

// quantize_row_q8_0_ref: d = amax/127, codes roundf(x * (1/d)).
void FromFloatQ8_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    const float d = AbsMax(src, kQK8_0) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    for (int j = 0; j < kQK8_0; ++j) blocks[i].qs[j] = RoundToI8(src[j] * id);
  }
}

float VecDotQ8_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += xb[i].qs[j] * yb[i].qs[j];
    sum += static_cast<float>(sumi) * (F16ToF32(xb[i].d) * F16ToF32(yb[i].d));
  }
  return sum;
}

void ToFloatQ8_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK8_1; ++i, dst += kQK8_1) {
    const float d = F16ToF32(blocks[i].d);
    for (int j = 0; j < kQK8_1; ++j) dst[j] = static_cast<float>(blocks[i].qs[j]) * d;
  }
}

// quantize_row_q8_1_ref: Q8_0's codes plus s = fp16(float(sum of codes) * d).
void FromFloatQ8_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK8_1; ++i, src += kQK8_1) {
    const float d = AbsMax(src, kQK8_1) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[i].d = F32ToF16(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      blocks[i].qs[j] = RoundToI8(src[j] * id);
      sum += blocks[i].qs[j];
    }
    blocks[i].s = F32ToF16(static_cast<float>(sum) * d);
  }
}

}  // namespace kvmem::kernels::scalar
