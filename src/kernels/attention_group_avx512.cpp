// AVX-512 attention over f16 or q8_0 K and V for the query heads of one KV head: the AVX2
// kernel's structure (attention_avx2.cpp) sixteen rows and sixteen dimensions at a time — each
// block of 16 K and V rows converted to f32 once for all queries; per query, 16 dot products
// accumulated in zmm lanes and reduced together, one running-max update and one vector exp per
// block, the V rows added with the block's weights. A q8_0 row converts exactly (an f16 scale
// times an int8 fits f32's mantissa), so q stays f32 and, unlike the per-head kernels, carries no
// quantization error. Requires head_dim % 16 == 0 (% 32 for q8_0).
#if defined(__x86_64__)

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention_internal.h"
#include "kernels/vec_math_avx2.h"

namespace kvmem::kernels {
namespace {

constexpr int kBlock = 16;

// Lane r is the sum of the lanes of v[r].
inline __m512 Hsum16(const __m512 v[kBlock]) {
  __m256 h[kBlock];
  for (int r = 0; r < kBlock; ++r) {
    h[r] = _mm256_add_ps(_mm512_castps512_ps256(v[r]), _mm512_extractf32x8_ps(v[r], 1));
  }
  return _mm512_insertf32x8(_mm512_castps256_ps512(avx2::Hsum8(h)), avx2::Hsum8(h + 8), 1);
}

inline __m512 Exp16(__m512 x) {
  const __m256 lo = avx2::Exp(_mm512_castps512_ps256(x));
  const __m256 hi = avx2::Exp(_mm512_extractf32x8_ps(x, 1));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// Rows n..15 repeat row n - 1, so every lane reads finite values (their scores are masked).
// kQ8: ggml Q8_0 rows (per 32 values an f16 scale, then 32 int8 codes); else f16 rows.
template <int kDim, bool kQ8>
void ConvertRows(const uint8_t* const* rows, int n, int head_dim, float* dst) {
  const int hd = kDim > 0 ? kDim : head_dim;
  for (int r = 0; r < kBlock; ++r) {
    const uint8_t* row = rows[r < n ? r : n - 1];
    float* out = dst + r * hd;
    if constexpr (kQ8) {
      for (int d = 0; d < hd; d += 32) {
        const uint8_t* block = row + (d / 32) * (2 + 32);
        uint16_t bits;
        std::memcpy(&bits, block, 2);
        const __m512 scale = _mm512_set1_ps(_cvtsh_ss(bits));
        for (int h = 0; h < 32; h += 16) {
          const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + h));
          _mm512_store_ps(out + d + h,
                          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)), scale));
        }
      }
    } else {
      for (int d = 0; d < hd; d += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
        _mm512_store_ps(out + d, _mm512_cvtph_ps(h));
      }
    }
  }
}

struct Running {
  float m = -INFINITY;
  float l = 0.0f;
};

template <int kDim>
void AddBlock(const float* q, int head_dim, const float* k, const float* v, int n, float scale,
              float* acc, Running* st) {
  const int hd = kDim > 0 ? kDim : head_dim;
  __m512 dots[kBlock];
  for (int r = 0; r < kBlock; ++r) dots[r] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 16) {
    const __m512 qv = _mm512_loadu_ps(q + d);
    for (int r = 0; r < kBlock; ++r) {
      dots[r] = _mm512_fmadd_ps(_mm512_load_ps(k + r * hd + d), qv, dots[r]);
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << n) - 1);
  const __m512 s = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY),
                                        _mm512_mul_ps(Hsum16(dots), _mm512_set1_ps(scale)));
  const float block_max = _mm512_reduce_max_ps(s);
  if (block_max > st->m) {
    const float alpha = std::exp(st->m - block_max);
    st->m = block_max;
    st->l *= alpha;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int d = 0; d < hd; d += 16) {
      _mm512_storeu_ps(acc + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), va));
    }
  }
  const __m512 p = _mm512_maskz_mov_ps(live, Exp16(_mm512_sub_ps(s, _mm512_set1_ps(st->m))));
  st->l += _mm512_reduce_add_ps(p);
  alignas(64) float pw[kBlock];
  _mm512_store_ps(pw, p);
  for (int d = 0; d < hd; d += 16) {
    __m512 o = _mm512_loadu_ps(acc + d);
    for (int r = 0; r < kBlock; ++r) {
      o = _mm512_fmadd_ps(_mm512_set1_ps(pw[r]), _mm512_load_ps(v + r * hd + d), o);
    }
    _mm512_storeu_ps(acc + d, o);
  }
}

template <int kDim, bool kKQ8, bool kVQ8>
void AttendGroup(const float* q, int n_q, int head_dim, const KvSpan* spans, int n_spans,
                 float scale, float* acc, float* m, float* l) {
  const int hd = kDim > 0 ? kDim : head_dim;
  alignas(64) float kf[kBlock * kAttendStackDim];
  alignas(64) float vf[kBlock * kAttendStackDim];
  std::memset(acc, 0, sizeof(float) * n_q * hd);
  std::vector<Running> st(n_q);
  ForEachRowBlock<kBlock>(
      spans, n_spans, [&](const uint8_t* const* k, const uint8_t* const* v, int n) {
        ConvertRows<kDim, kKQ8>(k, n, hd, kf);
        ConvertRows<kDim, kVQ8>(v, n, hd, vf);
        for (int g = 0; g < n_q; ++g) {
          AddBlock<kDim>(q + g * hd, hd, kf, vf, n, scale, acc + g * hd, &st[g]);
        }
      });
  for (int g = 0; g < n_q; ++g) {
    m[g] = st[g].m;
    l[g] = st[g].l;
  }
}

template <bool kKQ8, bool kVQ8>
void AttendGroupDims(const float* q, int n_q, int head_dim, const KvSpan* spans, int n_spans,
                     float scale, float* acc, float* m, float* l) {
  switch (head_dim) {
    case 64:
      return AttendGroup<64, kKQ8, kVQ8>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    case 128:
      return AttendGroup<128, kKQ8, kVQ8>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    case 256:
      return AttendGroup<256, kKQ8, kVQ8>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    default:
      return AttendGroup<0, kKQ8, kVQ8>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
  }
}

}  // namespace

void AttendGroupAvx512(const float* q, int n_q, const KvLayout& layout, const KvSpan* spans,
                       int n_spans, float scale, float* acc, float* m, float* l) {
  const bool k8 = layout.k == KType::kQ8_0, v8 = layout.v == VType::kQ8_0;
  const int hd = layout.head_dim;
  if (k8 && v8) return AttendGroupDims<true, true>(q, n_q, hd, spans, n_spans, scale, acc, m, l);
  if (k8) return AttendGroupDims<true, false>(q, n_q, hd, spans, n_spans, scale, acc, m, l);
  if (v8) return AttendGroupDims<false, true>(q, n_q, hd, spans, n_spans, scale, acc, m, l);
  AttendGroupDims<false, false>(q, n_q, hd, spans, n_spans, scale, acc, m, l);
}

}  // namespace kvmem::kernels

#endif  // __x86_64__
