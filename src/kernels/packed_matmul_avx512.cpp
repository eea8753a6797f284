// AVX-512 VNNI kernels over packed weights (kernels/packed_matrix.h): each zmm lane is one of a
// group's 16 rows. Per sub-block, vpdpbusd accumulates exact int32 sums of code products (two
// independent chains), which are then scaled in float: acc += float(isum) * (scale * d_act), and
// for kU4 accm += min * s_act. A token's result does not depend on how many tokens are computed
// together (the tile size only shares the weight loads), nor on the thread split.
#if defined(__x86_64__)

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/packed_internal.h"

namespace kvmem::kernels::avx512 {
namespace {

constexpr int kMaxTile = 4;  // tokens per pass over a group's weights

inline __m512i Broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <bool kF16>
inline __m512 LoadScales(const uint8_t* p) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    return _mm512_loadu_ps(p);
  }
}

inline void Store(float* y, __m512 v, int rows) {
  if (rows == kPackRows) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << rows) - 1), v);
  }
}

// kU4: 32-element sub-blocks, 4 chunks of 64 bytes, low nibbles elements 4c.., high 16 + 4c...
template <int T, bool kF16>
void GroupU4(const uint8_t* group, const PackedMatrix& m, const PackedActs& a, int64_t t0, float* y,
             int64_t y_stride, int rows) {
  const int64_t n_sub = m.n_in() / 32;
  const size_t scale_bytes = kPackRows * (kF16 ? 2 : 4);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T], accm[T];
  for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_sub; ++b) {
    const uint8_t* tile = group + b * m.tile_bytes();
    __m512i lo_sum[T], hi_sum[T];
    for (int t = 0; t < T; ++t) lo_sum[t] = hi_sum[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m512i x = _mm512_load_si512(tile + 64 * c);
      const __m512i lo = _mm512_and_si512(x, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low4);
      for (int t = 0; t < T; ++t) {
        const int8_t* q = a.codes(t0 + t) + 32 * b + 4 * c;
        lo_sum[t] = _mm512_dpbusd_epi32(lo_sum[t], lo, Broadcast4(q));
        hi_sum[t] = _mm512_dpbusd_epi32(hi_sum[t], hi, Broadcast4(q + 16));
      }
    }
    const __m512 scale = LoadScales<kF16>(tile + 256);
    const __m512 min = LoadScales<kF16>(tile + 256 + scale_bytes);
    for (int t = 0; t < T; ++t) {
      const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(lo_sum[t], hi_sum[t]));
      const __m512 s = _mm512_mul_ps(scale, _mm512_set1_ps(a.d16(t0 + t)[2 * b]));
      acc[t] = _mm512_fmadd_ps(isum, s, acc[t]);
      accm[t] = _mm512_fmadd_ps(min, _mm512_set1_ps(a.s32(t0 + t)[b]), accm[t]);
    }
  }
  for (int t = 0; t < T; ++t) Store(y + t * y_stride, _mm512_add_ps(acc[t], accm[t]), rows);
}

// kS8: kBlock-element sub-blocks of signed codes times unsigned activations (codes + 128), less
// 128 times each row's code sum.
template <int T, bool kF16, int kBlock>
void GroupS8(const uint8_t* group, const PackedMatrix& m, const PackedActs& a, int64_t t0, float* y,
             int64_t y_stride, int rows) {
  const int64_t n_sub = m.n_in() / kBlock;
  constexpr size_t kCodeBytes = kPackRows * kBlock;
  constexpr size_t kScaleBytes = kPackRows * (kF16 ? 2 : 4);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_sub; ++b) {
    const uint8_t* tile = group + b * m.tile_bytes();
    __m512i s0[T], s1[T];
    for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
    for (int c = 0; c < kBlock / 4; c += 2) {
      const __m512i w0 = _mm512_load_si512(tile + 64 * c);
      const __m512i w1 = _mm512_load_si512(tile + 64 * (c + 1));
      for (int t = 0; t < T; ++t) {
        const uint8_t* q = a.ucodes(t0 + t) + kBlock * b + 4 * c;
        s0[t] = _mm512_dpbusd_epi32(s0[t], Broadcast4(q), w0);
        s1[t] = _mm512_dpbusd_epi32(s1[t], Broadcast4(q + 4), w1);
      }
    }
    const __m512i bias = _mm512_slli_epi32(
        _mm512_cvtepi16_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + kCodeBytes + kScaleBytes))),
        7);
    const __m512 scale = LoadScales<kF16>(tile + kCodeBytes);
    for (int t = 0; t < T; ++t) {
      const __m512i i = _mm512_sub_epi32(_mm512_add_epi32(s0[t], s1[t]), bias);
      const __m512 s = _mm512_mul_ps(scale, _mm512_set1_ps(a.d16(t0 + t)[b * kBlock / 16]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) Store(y + t * y_stride, acc[t], rows);
}

using GroupFn = void (*)(const uint8_t*, const PackedMatrix&, const PackedActs&, int64_t, float*,
                         int64_t, int);

template <int T>
GroupFn Pick(const PackedMatrix& m) {
  if (m.kind() == PackedKind::kU4) return m.f16_scales() ? GroupU4<T, true> : GroupU4<T, false>;
  if (m.block() == 16) return m.f16_scales() ? GroupS8<T, true, 16> : GroupS8<T, false, 16>;
  return m.f16_scales() ? GroupS8<T, true, 32> : GroupS8<T, false, 32>;
}

}  // namespace

void PackedMatMulGroups(const PackedMatrix& m, const PackedActs& acts, int64_t n_tokens, int64_t g0,
                        int64_t g1, float* y, int64_t y_stride) {
  const GroupFn fns[kMaxTile] = {Pick<1>(m), Pick<2>(m), Pick<3>(m), Pick<4>(m)};
  for (int64_t g = g0; g < g1; ++g) {
    const int rows = static_cast<int>(std::min<int64_t>(kPackRows, m.n_out() - g * kPackRows));
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxTile) {
      const int tile = static_cast<int>(std::min<int64_t>(kMaxTile, n_tokens - t0));
      fns[tile - 1](m.group(g), m, acts, t0, y + t0 * y_stride + g * kPackRows, y_stride, rows);
    }
  }
}

}  // namespace kvmem::kernels::avx512

#endif  // __x86_64__
