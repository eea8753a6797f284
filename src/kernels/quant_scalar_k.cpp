// Scalar reference kernels for ggml's 256-element K-quants (Q2_K..Q6_K) and their activation
// format Q8_K. Dequantizers reproduce ggml-quants.c's dequantize_row_*_K bit for bit; Q8_K
// quantization reproduces quantize_row_q8_K_ref (which ggml also runs on x86); dot products sum
// integers per block and apply the block's float scales once.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_k_scales.h"

namespace kvmem::kernels::scalar {

// ---- Q2_K -------------------------------------------------------------------------------------

void ToFloatQ2_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const uint8_t* q = b.qs;
    int g = 0;
    for (int half = 0; half < kQK_K; half += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 32; part += 16, ++g) {
          const float dl = d * static_cast<float>(b.scales[g] & 0xF);
          const float ml = dmin * static_cast<float>(b.scales[g] >> 4);
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * static_cast<float>((q[part + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

float VecDotQ2_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ2_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ2_K& b = xb[i];
    const int8_t* q8 = yb[i].qs;
    int summs = 0;
    for (int g = 0; g < 16; ++g) summs += yb[i].bsums[g] * (b.scales[g] >> 4);
    int isum = 0;
    const uint8_t* q2 = b.qs;
    int g = 0;
    for (int half = 0; half < kQK_K; half += 128, q2 += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 32; part += 16, ++g, q8 += 16) {
          int s = 0;
          for (int l = 0; l < 16; ++l) s += q8[l] * ((q2[part + l] >> shift) & 3);
          isum += (b.scales[g] & 0xF) * s;
        }
      }
    }
    const float dall = yb[i].d * F16ToF32(b.d);
    const float dmin = yb[i].d * F16ToF32(b.dmin);
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

// ---- Q3_K -------------------------------------------------------------------------------------

void ToFloatQ3_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    int8_t scales[16];
    UnpackQ3KScales(b.scales, scales);
    const uint8_t* q = b.qs;
    uint8_t m = 1;
    int g = 0;
    for (int half = 0; half < kQK_K; half += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 32; part += 16, ++g) {
          const float dl = d * static_cast<float>(scales[g]);
          for (int l = 0; l < 16; ++l) {
            const int v = ((q[part + l] >> shift) & 3) - ((b.hmask[part + l] & m) ? 0 : 4);
            *dst++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

float VecDotQ3_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ3_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ3_K& b = xb[i];
    int8_t scales[16];
    UnpackQ3KScales(b.scales, scales);
    const int8_t* q8 = yb[i].qs;
    const uint8_t* q = b.qs;
    uint8_t m = 1;
    int g = 0;
    int isum = 0;
    for (int half = 0; half < kQK_K; half += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 32; part += 16, ++g, q8 += 16) {
          int s = 0;
          for (int l = 0; l < 16; ++l) {
            const int v = ((q[part + l] >> shift) & 3) - ((b.hmask[part + l] & m) ? 0 : 4);
            s += q8[l] * v;
          }
          isum += scales[g] * s;
        }
      }
    }
    sum += (F16ToF32(b.d) * yb[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// ---- Q4_K / Q5_K ------------------------------------------------------------------------------

void ToFloatQ4_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ4_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const KScalesMins sm = UnpackK4ScalesMins(b.scales);
    for (int g = 0; g < 8; ++g) {
      const float dl = d * static_cast<float>(sm.scales[g]);
      const float ml = dmin * static_cast<float>(sm.mins[g]);
      const uint8_t* q = b.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) *dst++ = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
    }
  }
}

float VecDotQ4_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ4_K& b = xb[i];
    const KScalesMins sm = UnpackK4ScalesMins(b.scales);
    int summs = 0;
    for (int g = 0; g < 16; ++g) summs += yb[i].bsums[g] * sm.mins[g / 2];
    int isum = 0;
    const int8_t* q8 = yb[i].qs;
    for (int g = 0; g < 8; ++g, q8 += 32) {
      const uint8_t* q = b.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += q8[l] * ((q[l] >> shift) & 0xF);
      isum += sm.scales[g] * s;
    }
    const float d = F16ToF32(b.d) * yb[i].d;
    const float dmin = F16ToF32(b.dmin) * yb[i].d;
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

namespace {
// The 5-bit code of element l (0..31) of group g of a Q5_K block.
inline int Q5KCode(const BlockQ5_K& b, int g, int l) {
  const int low = (b.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xF;
  return low | (((b.qh[l] >> g) & 1) << 4);
}
}  // namespace

void ToFloatQ5_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ5_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    const KScalesMins sm = UnpackK4ScalesMins(b.scales);
    for (int g = 0; g < 8; ++g) {
      const float dl = d * static_cast<float>(sm.scales[g]);
      const float ml = dmin * static_cast<float>(sm.mins[g]);
      for (int l = 0; l < 32; ++l) *dst++ = dl * static_cast<float>(Q5KCode(b, g, l)) - ml;
    }
  }
}

float VecDotQ5_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ5_K& b = xb[i];
    const KScalesMins sm = UnpackK4ScalesMins(b.scales);
    int summs = 0;
    for (int g = 0; g < 16; ++g) summs += yb[i].bsums[g] * sm.mins[g / 2];
    int isum = 0;
    const int8_t* q8 = yb[i].qs;
    for (int g = 0; g < 8; ++g, q8 += 32) {
      int s = 0;
      for (int l = 0; l < 32; ++l) s += q8[l] * Q5KCode(b, g, l);
      isum += sm.scales[g] * s;
    }
    const float d = F16ToF32(b.d) * yb[i].d;
    const float dmin = F16ToF32(b.dmin) * yb[i].d;
    sum += d * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

// ---- Q6_K -------------------------------------------------------------------------------------


void ToFloatQ6_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    const BlockQ6_K& b = blocks[i];
    const float d = F16ToF32(b.d);
    int8_t q[kQK_K];
    DecodeQ6K(b, q);
    for (int e = 0; e < kQK_K; ++e) {
      dst[e] = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(q[e]);
    }
  }
}

float VecDotQ6_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ6_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ6_K& b = xb[i];
    int8_t q[kQK_K];
    DecodeQ6K(b, q);
    int isum = 0;
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += yb[i].qs[16 * g + l] * q[16 * g + l];
      isum += b.scales[g] * s;
    }
    sum += (F16ToF32(b.d) * yb[i].d) * static_cast<float>(isum);
  }
  return sum;
}

// ---- Q8_K -------------------------------------------------------------------------------------

void ToFloatQ8_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i, dst += kQK_K) {
    const float d = blocks[i].d;
    for (int j = 0; j < kQK_K; ++j) dst[j] = d * static_cast<float>(blocks[i].qs[j]);
  }
}

// quantize_row_q8_K_ref: scale -127/max with max the signed value of largest magnitude (the first
// on ties), codes rounded half to even, d = 1/iscale. An all-zero block gets d = 0 and zero codes
// (ggml leaves bsums unset there; kvmem zeroes them).
void FromFloatQ8_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ8_K& b = blocks[i];
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof(b.qs));
      for (int g = 0; g < kQK_K / 16; ++g) b.bsums[g] = 0;
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(NearestIntQ8K(iscale * src[j]));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += b.qs[16 * g + l];
      b.bsums[g] = static_cast<int16_t>(s);
    }
    b.d = 1.0f / iscale;
  }
}

}  // namespace kvmem::kernels::scalar
