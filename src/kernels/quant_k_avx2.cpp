// AVX2/FMA kernels for the K-quants: Q4_K, Q5_K and Q6_K dot products with Q8_K, and Q8_K
// quantization. The dot products keep ggml's x86 AVX2 structure (the same int32 lane contents per
// block, one FMA per block into an eight-lane accumulator, the mins term through Q8_K's bsums),
// so they match llama.cpp's CPU backend. Q8_K quantization is bit-identical to the scalar
// reference, which is also what ggml runs on x86.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/quant_avx2_common.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"
#include "kernels/quant_k_scales.h"

namespace kvmem::kernels::avx2 {
namespace {

using quant_avx2_detail::HalfToFloat;
using quant_avx2_detail::HsumF32;
using quant_avx2_detail::HsumF32x4;
using quant_avx2_detail::HsumI32x4;

// Q8_K's 16 int16 bsums (read through bytes: the packed struct gives them no alignment).
inline __m256i LoadBsums(const BlockQ8_K& b) {
  const auto* p = reinterpret_cast<const uint8_t*>(&b) + offsetof(BlockQ8_K, bsums);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Four int32 lanes: sum over the eight 32-element groups of mins[g] * (bsum[2g] + bsum[2g+1]),
// paired as ggml pairs them.
inline __m128i MinsTimesBsums(const KScalesMins& sm, const BlockQ8_K& y) {
  const __m256i bsums = LoadBsums(y);
  const __m128i group_sums =
      _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
  uint64_t mins8;
  std::memcpy(&mins8, sm.mins, 8);
  const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mins8)));
  return _mm_madd_epi16(mins, group_sums);
}

}  // namespace

float VecDotQ4_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = yb[i].d * HalfToFloat(xb[i].d);
    const float dmin = -yb[i].d * HalfToFloat(xb[i].dmin);
    const KScalesMins sm = UnpackK4ScalesMins(xb[i].scales);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(MinsTimesBsums(sm, yb[i])), acc_m);

    const uint8_t* q4 = xb[i].qs;
    const int8_t* q8 = yb[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, q4 += 32, q8 += 64) {
      const __m256i bits = Load32(q4);
      const __m256i lo = _mm256_and_si256(bits, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
      const __m256i p_lo = _mm256_madd_epi16(_mm256_set1_epi16(sm.scales[2 * j]),
                                             _mm256_maddubs_epi16(lo, Load32(q8)));
      const __m256i p_hi = _mm256_madd_epi16(_mm256_set1_epi16(sm.scales[2 * j + 1]),
                                             _mm256_maddubs_epi16(hi, Load32(q8 + 32)));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return HsumF32(acc) + HsumF32x4(acc_m);
}

float VecDotQ5_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = yb[i].d * HalfToFloat(xb[i].d);
    const float dmin = -yb[i].d * HalfToFloat(xb[i].dmin);
    const KScalesMins sm = UnpackK4ScalesMins(xb[i].scales);
    summs += dmin * static_cast<float>(HsumI32x4(MinsTimesBsums(sm, yb[i])));

    const __m256i hbits = Load32(xb[i].qh);
    const uint8_t* q5 = xb[i].qs;
    const int8_t* q8 = yb[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, q5 += 32, q8 += 64) {
      const __m256i bits = Load32(q5);
      // Group 2j takes bit 2j of qh, group 2j+1 bit 2j+1; shifting 16-bit lanes then masking
      // each byte's bit 0 keeps bytes independent.
      const __m256i h0 = _mm256_slli_epi16(
          _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j)), one), 4);
      const __m256i h1 = _mm256_slli_epi16(
          _mm256_and_si256(_mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * j + 1)), one), 4);
      const __m256i q_lo = _mm256_or_si256(_mm256_and_si256(bits, low4), h0);
      const __m256i q_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), low4), h1);
      const __m256i p_lo = _mm256_madd_epi16(_mm256_set1_epi16(sm.scales[2 * j]),
                                             _mm256_maddubs_epi16(q_lo, Load32(q8)));
      const __m256i p_hi = _mm256_madd_epi16(_mm256_set1_epi16(sm.scales[2 * j + 1]),
                                             _mm256_maddubs_epi16(q_hi, Load32(q8 + 32)));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return HsumF32(acc) + summs;
}

// Codes are used unsigned (0..63) so maddubs applies; the -32 offset comes back as
// 32 * sum_g scale[g] * bsum[g].
float VecDotQ6_KQ8_K(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ6_K*>(x);
  const auto* yb = static_cast<const BlockQ8_K*>(y);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i low2 = _mm256_set1_epi8(0x03);
  const __m128i pair = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = yb[i].d * HalfToFloat(xb[i].d);
    const __m128i scales8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb[i].scales));
    const __m256i offset =
        _mm256_slli_epi32(_mm256_madd_epi16(LoadBsums(yb[i]), _mm256_cvtepi8_epi16(scales8)), 5);

    const uint8_t* ql = xb[i].ql;
    const uint8_t* qh = xb[i].qh;
    const int8_t* q8 = yb[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, q8 += 128) {
      const __m256i l0 = Load32(ql);
      const __m256i l1 = Load32(ql + 32);
      const __m256i h = Load32(qh);
      // Quarter k (elements 32k..32k+31 of this half) takes bit pair k of qh.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(h, low2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), low2), 4)),
      };
      for (int k = 0; k < 4; k += 2) {
        __m256i p[2];
        for (int u = 0; u < 2; ++u) {
          // Quarter k + u spans groups g and g + 1 of 16: its low eight int16 lanes take scale
          // g, the high eight g + 1.
          const int g = 8 * half + 2 * (k + u);
          const __m128i pick = _mm_add_epi8(pair, _mm_set1_epi8(static_cast<char>(g)));
          const __m256i scale = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pick));
          p[u] =
              _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q[k + u], Load32(q8 + 32 * (k + u))));
        }
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
      }
    }
    sumi = _mm256_sub_epi32(sumi, offset);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return HsumF32(acc);
}

void FromFloatQ8_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / kQK_K; ++i, src += kQK_K) {
    BlockQ8_K& b = blocks[i];
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQK_K; j += 8)
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(src + j)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof(b.qs));
      for (int g = 0; g < kQK_K / 16; ++g) b.bsums[g] = 0;
      continue;
    }
    // The reference takes the sign of the first element of largest magnitude.
    int first = 0;
    while (std::fabs(src[first]) != amax) ++first;
    const float iscale = -127.0f / src[first];
    const __m256 mul = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(src + j + 8 * k), mul),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_cvtps_epi32(r);
      }
      const __m256i p8 =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i ordered =
          _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b.qs + j), ordered);
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += b.qs[16 * g + l];
      b.bsums[g] = static_cast<int16_t>(s);
    }
    b.d = 1.0f / iscale;
  }
}

}  // namespace kvmem::kernels::avx2

#endif  // defined(__x86_64__)
