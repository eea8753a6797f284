// AVX2/FMA/F16C kernels for the float types and ggml's 32-element formats. Each quantized dot
// product keeps the structure of ggml's x86 AVX2 path (one block's integer products summed into
// eight int32 lanes, converted to float and accumulated with one FMA per block into a single
// eight-lane accumulator, reduced by the same horizontal sum), so results equal llama.cpp's CPU
// backend bit for bit, also against an AVX-512/VNNI build of it (same integer lanes). The float
// dot products follow ggml's AVX2 build; an AVX-512 build sums in 16 lanes and agrees only to
// rounding. Every load is unaligned; blocks can sit at any address.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "core/fp16.h"
#include "kernels/quant_avx2_common.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"

namespace kvmem::kernels::avx2 {
namespace {

using quant_avx2_detail::ExpandBits32;
using quant_avx2_detail::FloatToHalf;
using quant_avx2_detail::HalfPairsToFloat;
using quant_avx2_detail::HalfProduct;
using quant_avx2_detail::HalfToFloat;
using quant_avx2_detail::HsumF32;
using quant_avx2_detail::HsumI32;
using quant_avx2_detail::LoadNibbles32;
using quant_avx2_detail::MulSumI8Pairs;
using quant_avx2_detail::MulSumU8I8Pairs;
using quant_avx2_detail::StoreI8x32AsFloat;

inline __m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256 LoadBF16x8(const uint8_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ggml's GGML_F32x8_REDUCE over four accumulators.
inline float Reduce4(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
  s0 = _mm256_add_ps(s0, s2);
  s1 = _mm256_add_ps(s1, s3);
  s0 = _mm256_add_ps(s0, s1);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// Max |x| of 32 floats, reduced in ggml's order (the result is exact in any order).
inline float AbsMax32(const __m256 v[4]) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, v[0]);
  for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// ggml's AVX2 Q8 activation quantizer: d = amax/127, codes round_half_even(x * (127/amax)).
// Writes the 32 codes and returns d; *sum gets the sum of the codes.
inline float QuantizeQ8Block(const float* x, int8_t* qs, int* sum) {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  const float amax = AbsMax32(v);
  const float d = amax / 127.0f;
  const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 r =
        _mm256_round_ps(_mm256_mul_ps(v[k], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[k] = _mm256_cvtps_epi32(r);
  }
  *sum = HsumI32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  // Packing works per 128-bit lane; the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
  const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), ordered);
  return d;
}

}  // namespace

// ---- Float types ------------------------------------------------------------------------------

float VecDotF32(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const float*>(x);
  const auto* b = static_cast<const float*>(y);
  const int64_t np = n & ~int64_t{31};
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32) {
    for (int k = 0; k < 4; ++k) {
      s[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), s[k]);
    }
  }
  float sum = Reduce4(s[0], s[1], s[2], s[3]);
  for (int64_t i = np; i < n; ++i) {
    float ai, bi;  // rows may sit at any byte address
    std::memcpy(&ai, a + i, 4);
    std::memcpy(&bi, b + i, 4);
    sum += ai * bi;
  }
  return sum;
}

void ToFloatF16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadF16x8(p + 2 * i));
  for (; i < n; ++i) dst[i] = F16ToF32(LoadU16(p + 2 * i));
}

void FromFloatF16(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

// ggml_vec_dot_f16: four FMA accumulators over 32-element steps, tail summed in double.
float VecDotF16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint8_t*>(x);
  const auto* b = static_cast<const uint8_t*>(y);
  const int64_t np = n & ~int64_t{31};
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const int64_t off = 2 * (i + 8 * k);
      s[k] = _mm256_fmadd_ps(LoadF16x8(a + off), LoadF16x8(b + off), s[k]);
    }
  }
  double sum = Reduce4(s[0], s[1], s[2], s[3]);
  for (int64_t i = np; i < n; ++i) {
    sum += static_cast<double>(F16ToF32(LoadU16(a + 2 * i)) * F16ToF32(LoadU16(b + 2 * i)));
  }
  return static_cast<float>(sum);
}

void ToFloatBF16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBF16x8(p + 2 * i));
  for (; i < n; ++i) dst[i] = BF16ToF32(LoadU16(p + 2 * i));
}

// ggml_vec_dot_bf16 (AVX2): multiply then add (no FMA) into four accumulators, tail in double.
float VecDotBF16(int64_t n, const void* x, const void* y) {
  const auto* a = static_cast<const uint8_t*>(x);
  const auto* b = static_cast<const uint8_t*>(y);
  __m256 c[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const int64_t off = 2 * (i + 8 * k);
      c[k] = _mm256_add_ps(_mm256_mul_ps(LoadBF16x8(a + off), LoadBF16x8(b + off)), c[k]);
    }
  }
  const __m256 all = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
  __m128 g = _mm_add_ps(_mm256_extractf128_ps(all, 1), _mm256_castps256_ps128(all));
  g = _mm_add_ps(g, _mm_movehl_ps(g, g));
  g = _mm_add_ss(g, _mm_movehdup_ps(g));
  double sum = _mm_cvtss_f32(g);
  for (; i < n; ++i) {
    sum += static_cast<double>(BF16ToF32(LoadU16(a + 2 * i)) * BF16ToF32(LoadU16(b + 2 * i)));
  }
  return static_cast<float>(sum);
}

// ---- Dequantization (bit-identical to the scalar reference: multiply, then add) -------------

void ToFloatQ4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const __m256 d = _mm256_set1_ps(HalfToFloat(blocks[i].d));
    const __m256i q = _mm256_sub_epi8(LoadNibbles32(blocks[i].qs), eight);
    StoreI8x32AsFloat(q, d, _mm256_setzero_ps(), /*add_offset=*/false, dst);
  }
}

void ToFloatQ4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK4_1; ++i, dst += kQK4_1) {
    const __m256 d = _mm256_set1_ps(HalfToFloat(blocks[i].d));
    const __m256 m = _mm256_set1_ps(HalfToFloat(blocks[i].m));
    StoreI8x32AsFloat(LoadNibbles32(blocks[i].qs), d, m, /*add_offset=*/true, dst);
  }
}

void ToFloatQ8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const __m256 d = _mm256_set1_ps(HalfToFloat(blocks[i].d));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[i].qs));
    StoreI8x32AsFloat(q, d, _mm256_setzero_ps(), /*add_offset=*/false, dst);
  }
}

// ---- Activation quantizers -------------------------------------------------------------------

void FromFloatQ8_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    int sum;
    blocks[i].d = FloatToHalf(QuantizeQ8Block(src, blocks[i].qs, &sum));
  }
}

void FromFloatQ8_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK8_1; ++i, src += kQK8_1) {
    int sum;
    const float d = QuantizeQ8Block(src, blocks[i].qs, &sum);
    blocks[i].d = FloatToHalf(d);
    blocks[i].s = FloatToHalf(d * static_cast<float>(sum));
  }
}

// ---- Dot products -----------------------------------------------------------------------------

float VecDotQ4_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  const __m256i eight = _mm256_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(HalfProduct(xb[i].d, yb[i].d));
    const __m256i qx = _mm256_sub_epi8(LoadNibbles32(xb[i].qs), eight);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(d, MulSumI8Pairs(qx, qy), acc);
  }
  return HsumF32(acc);
}

float VecDotQ4_1Q8_1(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ4_1*>(x);
  const auto* yb = static_cast<const BlockQ8_1*>(y);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    // {x.d * y.d, x.m * y.s}: the block's scale and its offset term.
    const __m128 h = HalfPairsToFloat(&xb[i], &yb[i]);
    const __m128 prods = _mm_mul_ps(h, _mm_movehl_ps(h, h));
    summs += _mm_cvtss_f32(_mm_movehdup_ps(prods));
    const __m256 d = _mm256_broadcastss_ps(prods);
    const __m256i qx = LoadNibbles32(xb[i].qs);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(d, MulSumU8I8Pairs(qx, qy), acc);
  }
  return HsumF32(acc) + summs;
}

float VecDotQ5_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  const __m256i high_nibble = _mm256_set1_epi8(static_cast<char>(0xF0));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(HalfProduct(xb[i].d, yb[i].d));
    // code - 16 as int8: the nibble where the fifth bit is set, nibble | 0xF0 (= nibble - 16)
    // where it is clear.
    const __m256i clear = _mm256_andnot_si256(ExpandBits32(xb[i].qh), high_nibble);
    const __m256i qx = _mm256_or_si256(LoadNibbles32(xb[i].qs), clear);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(d, MulSumI8Pairs(qx, qy), acc);
  }
  return HsumF32(acc);
}

float VecDotQ5_1Q8_1(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ5_1*>(x);
  const auto* yb = static_cast<const BlockQ8_1*>(y);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  for (int64_t i = 0; i < n / kQK8_1; ++i) {
    const __m128 h = HalfPairsToFloat(&xb[i], &yb[i]);  // {x.d, x.m, y.d, y.s}
    const __m128 prods = _mm_mul_ps(h, _mm_movehl_ps(h, h));
    summs += _mm_cvtss_f32(_mm_movehdup_ps(prods));
    const __m256i high = _mm256_and_si256(ExpandBits32(xb[i].qh), bit4);
    const __m256i qx = _mm256_or_si256(LoadNibbles32(xb[i].qs), high);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(MulSumU8I8Pairs(qx, qy), _mm256_broadcastss_ps(prods), acc);
  }
  return HsumF32(acc) + summs;
}

float VecDotQ8_0Q8_0(int64_t n, const void* x, const void* y) {
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const auto* yb = static_cast<const BlockQ8_0*>(y);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(HalfProduct(xb[i].d, yb[i].d));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[i].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs));
    acc = _mm256_fmadd_ps(d, MulSumI8Pairs(qx, qy), acc);
  }
  return HsumF32(acc);
}

}  // namespace kvmem::kernels::avx2

#endif  // defined(__x86_64__)
