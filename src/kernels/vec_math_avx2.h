// AVX2/FMA building blocks shared by the *_avx2.cpp kernels: a vector expf and horizontal
// reductions. Include only from files compiled with -mavx2 -mfma (see cmake/Layers.cmake).
// Thread-safe: pure functions.
#pragma once

#include <immintrin.h>

namespace kvmem::kernels::avx2 {

// exp(x) per lane, within 1 ulp of the correctly rounded result (checked over all 2.2e9 floats
// in [-104, 89]: 0.8% are 1 ulp off, none more; ops_test checks <= 2 ulp on a sweep).
// Overflows to +inf above ~88.72, underflows through the subnormals to +0 below ~-103.97; NaN
// stays NaN.
//
// exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2] (ln2 split in
// two so n * ln2_hi is exact); exp(r) = 1 + r + r^2 P(r) with P the Taylor series to r^5 /
// 5040 (truncation < 2^-27 relative); adding 1 last keeps the rounding error near 0.5 ulp.
// 2^n is applied as two factors 2^(n/2) 2^(n - n/2) so results in the subnormal range are
// rounded once, correctly.
inline __m256 Exp(__m256 x) {
  // The max/min operand order keeps NaN: max_ps/min_ps return the second operand if either is NaN.
  x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 er = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(r2, p, r));
  // n in [-150, 128], so both halves lie in [-75, 64] and their powers of two are normal.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(er, s1), s2);
}

// Sum of the 8 lanes.
inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Max of the 8 lanes.
inline float Hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane r of the result is the sum of the lanes of v[r]: eight horizontal sums at the cost of
// about two.
inline __m256 Hsum8(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  // u0 = [v0 v1 v2 v3 partial sums of lanes 0..3 | the same of lanes 4..7], u1 for v4..v7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Adds the 8 lanes of v, widened to double, into the 4 lanes of acc.
inline __m256d AddWidened(__m256d acc, __m256 v) {
  acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

inline double HsumPd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// All-ones in lanes 0..n-1 (n in 0..8), zero above: the mask of a loop's tail.
inline __m256i TailMask(int n) {
  alignas(32) static constexpr int kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                 0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - n));
}

}  // namespace kvmem::kernels::avx2
