// Scalar reference kernels for MXFP4 (GPT-OSS's expert weights), as ggml's dequantize_row_mxfp4
// and ggml_vec_dot_mxfp4_q8_0: the integer products of a block (twice the E2M1 values times the
// Q8_0 codes) summed per half, then scaled by the Q8_0 scale times 2^(e - 128).
#include <cmath>

#include "core/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"

namespace kvmem::kernels::scalar {
namespace {

constexpr int kHalf = kQKMxfp4 / 2;

}  // namespace

float Mxfp4Scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

void ToFloatMxfp4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMxfp4*>(src);
  for (int64_t i = 0; i < n / kQKMxfp4; ++i, dst += kQKMxfp4) {
    const float d = Mxfp4Scale(blocks[i].e);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = kMxfp4Values[blocks[i].qs[j] & 0x0F] * d;
      dst[j + kHalf] = kMxfp4Values[blocks[i].qs[j] >> 4] * d;
    }
  }
}

float VecDotMxfp4Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockMxfp4*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKMxfp4; ++i) {
    const float d = F16ToF32(yb[i].d) * Mxfp4Scale(xb[i].e);
    int lo = 0, hi = 0;
    for (int j = 0; j < kHalf; ++j) {
      lo += yb[i].qs[j] * kMxfp4Values[xb[i].qs[j] & 0x0F];
      hi += yb[i].qs[j + kHalf] * kMxfp4Values[xb[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(lo + hi);
  }
  return sum;
}

}  // namespace kvmem::kernels::scalar
