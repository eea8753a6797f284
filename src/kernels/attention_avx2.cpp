// AVX2/FMA/F16C attention over f16 K and V (the default KV format; quantized formats are in
// attention_quant_avx2.cpp). Rows are taken eight at a time across span boundaries (a block holds
// row pointers, so spans of any length fill it): eight dot products share each q chunk and end
// in one transposed horizontal sum; the block's max updates the running max once (rescaling the
// accumulator only when it grows); one vector exp gives the eight weights; the V rows are then
// added chunk by chunk, so the accumulator is loaded and stored once per block.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_internal.h"
#include "kernels/vec_math_avx2.h"

namespace kvmem::kernels {
namespace {

constexpr int kBlock = 8;

// Eight f16 values starting at element `d` of the row at p.
inline __m256 LoadF16(const uint8_t* p, int d) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * d)));
}

struct OnlineSoftmax {
  float* acc;  // (head_dim) sum of weight * v, relative to exp(m)
  float m = -INFINITY;
  float l = 0.0f;  // sum of weights, relative to exp(m)
};

// Adds rows k[0..n), v[0..n) (n in 1..8) to `st`. Pointers k[n..8), v[n..8) must be readable
// rows (the caller repeats a real row); their scores are masked out. kDim > 0 fixes head_dim at
// compile time (fully unrolled loops for the common sizes); kDim == 0 reads `dim`.
template <int kDim>
void AddBlock(const float* q, int dim, const uint8_t* const* k, const uint8_t* const* v, int n,
              float scale, OnlineSoftmax* st) {
  const int head_dim = kDim > 0 ? kDim : dim;
  __m256 dots[kBlock];
  for (int r = 0; r < kBlock; ++r) dots[r] = _mm256_setzero_ps();
  for (int d = 0; d < head_dim; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int r = 0; r < kBlock; ++r) dots[r] = _mm256_fmadd_ps(LoadF16(k[r], d), qv, dots[r]);
  }
  __m256 s = _mm256_mul_ps(avx2::Hsum8(dots), _mm256_set1_ps(scale));
  const __m256 live = _mm256_castsi256_ps(avx2::TailMask(n));
  s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, live);

  const float block_max = avx2::Hmax(s);
  if (block_max > st->m) {
    const float alpha = std::exp(st->m - block_max);
    st->m = block_max;
    st->l *= alpha;
    const __m256 va = _mm256_set1_ps(alpha);
    for (int d = 0; d < head_dim; d += 8) {
      _mm256_storeu_ps(st->acc + d, _mm256_mul_ps(_mm256_loadu_ps(st->acc + d), va));
    }
  }
  const __m256 p = _mm256_and_ps(avx2::Exp(_mm256_sub_ps(s, _mm256_set1_ps(st->m))), live);
  st->l += avx2::Hsum(p);

  alignas(32) float pw[kBlock];
  _mm256_store_ps(pw, p);
  __m256 pb[kBlock];
  for (int r = 0; r < kBlock; ++r) pb[r] = _mm256_set1_ps(pw[r]);
  for (int d = 0; d < head_dim; d += 8) {
    __m256 o = _mm256_loadu_ps(st->acc + d);
    for (int r = 0; r < kBlock; ++r) o = _mm256_fmadd_ps(pb[r], LoadF16(v[r], d), o);
    _mm256_storeu_ps(st->acc + d, o);
  }
}

template <int kDim>
void Attend(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
            float* out) {
  alignas(32) float acc[kAttendStackDim];
  std::memset(acc, 0, sizeof(float) * head_dim);
  OnlineSoftmax st{.acc = acc};
  const uint8_t* k[kBlock];
  const uint8_t* v[kBlock];
  int n = 0;
  for (int sp = 0; sp < n_spans; ++sp) {
    const KvSpan& span = spans[sp];
    for (int64_t j = 0; j < span.n_rows; ++j) {
      k[n] = span.k + j * span.k_stride;
      v[n] = span.v + j * span.v_stride;
      if (++n == kBlock) {
        AddBlock<kDim>(q, head_dim, k, v, n, scale, &st);
        n = 0;
      }
    }
  }
  if (n > 0) {
    for (int r = n; r < kBlock; ++r) {
      k[r] = k[n - 1];
      v[r] = v[n - 1];
    }
    AddBlock<kDim>(q, head_dim, k, v, n, scale, &st);
  }
  const __m256 inv = _mm256_set1_ps(st.l == 0.0f ? 0.0f : 1.0f / st.l);
  for (int d = 0; d < head_dim; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
  }
}

}  // namespace

void AttendF16Avx2(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                   float* out) {
  switch (head_dim) {
    case 64:
      return Attend<64>(q, head_dim, spans, n_spans, scale, out);
    case 128:
      return Attend<128>(q, head_dim, spans, n_spans, scale, out);
    case 256:
      return Attend<256>(q, head_dim, spans, n_spans, scale, out);
    default:
      return Attend<0>(q, head_dim, spans, n_spans, scale, out);
  }
}

}  // namespace kvmem::kernels
