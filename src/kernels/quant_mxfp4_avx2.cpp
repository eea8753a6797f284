// AVX2 kernels for MXFP4: a block's 32 nibbles become int8 values through one byte shuffle of the
// value table, then the same signed int8 products, eight int32 lanes and one FMA per block as
// the other 32-element formats (quant_avx2.cpp), equal to the scalar reference bit for bit.
#if defined(__x86_64__)

#include <immintrin.h>

#include "core/fp16.h"
#include "kernels/quant_avx2_common.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"

namespace kvmem::kernels::avx2 {
namespace {

using quant_avx2_detail::HalfToFloat;
using quant_avx2_detail::HsumF32;
using quant_avx2_detail::LoadNibbles32;
using quant_avx2_detail::MulSumI8Pairs;
using quant_avx2_detail::StoreI8x32AsFloat;

// The 32 int8 values of a block, elements 0..31 in order.
inline __m256i Mxfp4Values(const BlockMxfp4& b) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), LoadNibbles32(b.qs));
}

}  // namespace

void ToFloatMxfp4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMxfp4*>(src);
  for (int64_t i = 0; i < n / kQKMxfp4; ++i, dst += kQKMxfp4) {
    const __m256 d = _mm256_set1_ps(scalar::Mxfp4Scale(blocks[i].e));
    StoreI8x32AsFloat(Mxfp4Values(blocks[i]), d, _mm256_setzero_ps(), /*add_offset=*/false, dst);
  }
}

float VecDotMxfp4Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockMxfp4*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKMxfp4; ++i) {
    const __m256 d = _mm256_set1_ps(HalfToFloat(yb[i].d) * scalar::Mxfp4Scale(xb[i].e));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(d, MulSumI8Pairs(Mxfp4Values(xb[i]), qy), acc);
  }
  return HsumF32(acc);
}

}  // namespace kvmem::kernels::avx2

#endif  // defined(__x86_64__)
