// AVX2/FMA/F16C attention over f16 K and V (the default KV format; quantized formats are in
// attention_quant_avx2.cpp). Rows are taken eight at a time across span boundaries (a block holds
// row pointers, so spans of any length fill it) and converted to f32 once for all the queries
// sharing them (GQA); per query, eight dot products share each q chunk and end in one transposed
// horizontal sum; the block's max updates the running max once (rescaling the accumulator only
// when it grows); one vector exp gives the eight weights; the V rows are then added chunk by
// chunk, so the accumulator is loaded and stored once per block.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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

// Adds rows k[0..n), v[0..n) (n in 1..8; f32, kBlock rows of head_dim floats each) to `st`;
// the scores of rows n..7 are masked out. kDim > 0 fixes head_dim at compile time (fully unrolled
// loops for the common sizes); kDim == 0 reads `dim`.
template <int kDim>
void AddBlock(const float* q, int dim, const float* k, const float* v, int n, float scale,
              OnlineSoftmax* st) {
  const int head_dim = kDim > 0 ? kDim : dim;
  __m256 dots[kBlock];
  for (int r = 0; r < kBlock; ++r) dots[r] = _mm256_setzero_ps();
  for (int d = 0; d < head_dim; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int r = 0; r < kBlock; ++r) {
      dots[r] = _mm256_fmadd_ps(_mm256_load_ps(k + r * head_dim + d), qv, dots[r]);
    }
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
    for (int r = 0; r < kBlock; ++r) {
      o = _mm256_fmadd_ps(pb[r], _mm256_load_ps(v + r * head_dim + d), o);
    }
    _mm256_storeu_ps(st->acc + d, o);
  }
}

// Converts n (1..8) f16 rows to f32 into dst (kBlock rows of kDim or dim floats); rows n..7 copy
// row n - 1 so every lane reads finite values.
template <int kDim>
void ConvertRows(const uint8_t* const* rows, int n, int dim, float* dst) {
  const int head_dim = kDim > 0 ? kDim : dim;
  for (int r = 0; r < kBlock; ++r) {
    const uint8_t* row = rows[r < n ? r : n - 1];
    for (int d = 0; d < head_dim; d += 8) _mm256_store_ps(dst + r * head_dim + d, LoadF16(row, d));
  }
}

// n_q queries over the same rows: each block of eight K and V rows is converted once and scored
// and accumulated for every query (the query heads of one KV head under GQA).
template <int kDim>
void AttendGroup(const float* q, int n_q, int dim, const KvSpan* spans, int n_spans, float scale,
                 float* acc, float* m, float* l) {
  const int head_dim = kDim > 0 ? kDim : dim;
  alignas(32) float kf[kBlock * kAttendStackDim];
  alignas(32) float vf[kBlock * kAttendStackDim];
  std::memset(acc, 0, sizeof(float) * n_q * head_dim);
  std::vector<OnlineSoftmax> st(n_q);
  for (int g = 0; g < n_q; ++g) st[g].acc = acc + g * head_dim;
  ForEachRowBlock<kBlock>(spans, n_spans,
                          [&](const uint8_t* const* k, const uint8_t* const* v, int n) {
                            ConvertRows<kDim>(k, n, head_dim, kf);
                            ConvertRows<kDim>(v, n, head_dim, vf);
                            for (int g = 0; g < n_q; ++g)
                              AddBlock<kDim>(q + g * head_dim, head_dim, kf, vf, n, scale, &st[g]);
                          });
  for (int g = 0; g < n_q; ++g) {
    m[g] = st[g].m;
    l[g] = st[g].l;
  }
}

}  // namespace

void AttendF16GroupAvx2(const float* q, int n_q, int head_dim, const KvSpan* spans, int n_spans,
                        float scale, float* acc, float* m, float* l) {
  switch (head_dim) {
    case 64:
      return AttendGroup<64>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    case 128:
      return AttendGroup<128>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    case 256:
      return AttendGroup<256>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
    default:
      return AttendGroup<0>(q, n_q, head_dim, spans, n_spans, scale, acc, m, l);
  }
}

void AttendF16Avx2(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                   float* out) {
  alignas(32) float acc[kAttendStackDim];
  float m, l;
  AttendF16GroupAvx2(q, 1, head_dim, spans, n_spans, scale, acc, &m, &l);
  const __m256 inv = _mm256_set1_ps(l == 0.0f ? 0.0f : 1.0f / l);
  for (int d = 0; d < head_dim; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
  }
}

}  // namespace kvmem::kernels
