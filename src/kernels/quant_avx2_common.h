// AVX2 building blocks shared by the quantization kernels (quant_avx2.cpp, quant_k_avx2.cpp).
// Include only from files compiled with -mavx2 -mfma -mf16c. Internal to kernels/; the helpers
// live in their own namespace so they cannot collide with other inline AVX2 helpers (ODR).
// Thread-safe: pure inline functions.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvmem::kernels::quant_avx2_detail {

// Hardware half <-> float conversions: the same bits as core/fp16.h, fewer instructions.
inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t FloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// The product a * b of two fp16 values as floats, with one conversion for both.
inline float HalfProduct(uint16_t a, uint16_t b) {
  const __m128 h = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (uint32_t{b} << 16))));
  return _mm_cvtss_f32(_mm_mul_ss(h, _mm_movehdup_ps(h)));
}

// The fp16 pairs at a and b (4 bytes each, any alignment) as floats {a0, a1, b0, b1}.
inline __m128 HalfPairsToFloat(const void* a, const void* b) {
  uint32_t ua, ub;
  std::memcpy(&ua, a, 4);
  std::memcpy(&ub, b, 4);
  return _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(static_cast<int>(ua)),
                                         _mm_cvtsi32_si128(static_cast<int>(ub))));
}

// ggml's hsum_float_8: (high + low halves), then pairs, then the last two.
inline float HsumF32(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// ggml's reduction of a four-lane float accumulator.
inline float HsumF32x4(__m128 r) {
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline int HsumI32(__m256i v) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(r);
}

inline int HsumI32x4(__m128i r) {
  r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(r);
}

// 16 bytes of packed nibbles -> 32 bytes in 0..15: low nibbles first (elements 0..15), then the
// high nibbles (elements 16..31), the order of ggml's 32-element blocks.
inline __m256i LoadNibbles32(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits (little-endian at p) -> 32 bytes, 0xFF where the bit is set, 0x00 where it is clear.
inline __m256i ExpandBits32(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  // Byte k of the result looks at byte k / 8 of `bits` (shuffles stay within 128-bit lanes, and
  // each lane holds all four bytes) and tests bit k % 8.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// Sums of products of unsigned bytes u (<= 128) and signed bytes s, four at a time,
// as eight float lanes (pairs never saturate the int16 step for ggml's value ranges).
inline __m256 MulSumU8I8Pairs(__m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

// Signed x signed: |x| times y with x's sign moved onto y (ggml's mul_sum_i8_pairs_float; exact
// while y != -128, which activation quantizers never produce).
inline __m256 MulSumI8Pairs(__m256i x, __m256i y) {
  return MulSumU8I8Pairs(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// 32 int8 codes -> 32 floats code * d (+ m when add_offset), rounded as the scalar code: multiply,
// then a separate add.
inline void StoreI8x32AsFloat(__m256i q, __m256 d, __m256 m, bool add_offset, float* dst) {
  const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
  for (int h = 0; h < 2; ++h) {
    const __m128i part = halves[h];
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(part, 8)));
    __m256 a = _mm256_mul_ps(lo, d);
    __m256 b = _mm256_mul_ps(hi, d);
    if (add_offset) {
      a = _mm256_add_ps(a, m);
      b = _mm256_add_ps(b, m);
    }
    _mm256_storeu_ps(dst + 16 * h, a);
    _mm256_storeu_ps(dst + 16 * h + 8, b);
  }
}

}  // namespace kvmem::kernels::quant_avx2_detail
