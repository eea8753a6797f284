// AVX-512 attention over f16 or q8_0 K and V for the query heads of one KV head (decode at depth
// spends its time here). Rows go in tiles of up to kTile, each in two passes, so that the work
// per row is little more than its multiply-adds:
//   1. scores: each K row is converted to f32 in registers once and dotted with every query of
//      the pass (q pre-multiplied by the scale); the 16 per-row partial vectors of a query are
//      reduced together by a shuffle tree, and the tile's maximum kept per query;
//   2. softmax and V: one rescale of the accumulators per tile (not per 16 rows), the weights
//      exp(s - m) sixteen at a time, then each V row converted once and added into accumulators
//      held in registers across the tile (a q8_0 row's scale folded into the weights).
// Pass 1 prefetches K and V rows kPrefetchRows ahead, across tiles: a tile's rows come from one
// 256-row pool block, a stream too short for the hardware prefetcher, and at depth the kernel
// waits on memory as much as it computes (bench/README.md).
// q8_0 K with head_dim % 64 == 0 is scored as the per-head kernels and ggml score it: q quantized
// to Q8_0 (the AVX2 quantizer), integer dot products per block (VNNI: K bytes made unsigned,
// the offset taken back by the accumulator's start value), the block sums of 16 rows reduced
// by the same shuffle tree stopped before its last fold (which would add the two blocks), then
// scaled by d_k * d_q. Other layouts convert K rows to f32 and keep q exact (a q8_0 row converts
// exactly: an f16 scale times an int8 fits f32's mantissa). Queries go through in passes of at
// most kMaxPass (registers); a larger group reads its rows once per pass. Requires head_dim % 16
// == 0 (% 32 for q8_0) and head_dim <= kAttendStackDim.
#if defined(__x86_64__)

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_internal.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_internal.h"

namespace kvmem::kernels {
namespace {

constexpr int kTile = 256;         // rows per tile
constexpr int kSegment = 1024;     // rows whose pointers are gathered at once (the lookahead)
constexpr int kMaxPass = 4;        // queries per pass
constexpr int kPrefetchRows = 16;  // 8 and 32 measured the same
constexpr int kQ8Block = 34;       // ggml Q8_0: f16 scale, 32 int8 codes
constexpr int kMaxScales = kAttendStackDim / 32;  // q8_0 blocks per row
constexpr int kMaxPairs = kAttendStackDim / 64;   // 64-dimension pairs of q8_0 blocks per row

// Integer scoring of q8_0 K (head_dim % 64 == 0): it takes 64 dimensions (two blocks) per VNNI
// instruction.
template <int kDim, bool kKQ8>
constexpr bool kIntScores = kKQ8 && kDim > 0 && kDim % 64 == 0;

// exp(x) per lane: vec_math_avx2.h's Exp (same constants, same steps) on 16 lanes, so both give
// the same bits.
inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 er = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(r2, p, r));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(er, s1), s2);
}

// Lane r is the sum of the lanes of v[r]: a tree of 45 in-register shuffles and adds for 16
// sums. Level 1 folds lanes 2-3 of each 128-bit quarter onto 0-1 (two vectors interleaved), level
// 2 folds again (four vectors per quarter), levels 3 and 4 fold the quarters.
inline __m512 Hsum16(const __m512 v[16]) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) {
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  // a[i] quarter j: (v[2i] lanes 0+2, v[2i+1] 0+2, v[2i] 1+3, v[2i+1] 1+3) of that quarter.
  for (int i = 0; i < 4; ++i) {
    b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], 0xEE));
  }
  // b[i] quarter j: the quarter-j sums of v[4i .. 4i+3].
  for (int i = 0; i < 2; ++i) {
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
  }
  // c[i] = (b[2i] quarters 0+1, b[2i] 2+3, b[2i+1] 0+1, b[2i+1] 2+3).
  return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                       _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
}

// The int32 form of Hsum16, stopped before its last fold: lo lane r = the sum of lanes 0-7 of
// v[r], hi lane r = the sum of lanes 8-15 (a q8_0 row's two blocks of one 64-dimension pair).
inline void HsumHalves16(const __m512i v[16], __m512i* lo, __m512i* hi) {
  __m512i a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i) {
    a[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512 x = _mm512_castsi512_ps(a[2 * i]), y = _mm512_castsi512_ps(a[2 * i + 1]);
    b[i] = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, 0x44)),
                            _mm512_castps_si512(_mm512_shuffle_ps(x, y, 0xEE)));
  }
  for (int i = 0; i < 2; ++i) {
    c[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0x88),
                            _mm512_shuffle_i32x4(b[2 * i], b[2 * i + 1], 0xDD));
  }
  // c[i] = (lanes 0-7 of v[8i..8i+3], lanes 8-15 of them, the same of v[8i+4..8i+7]).
  *lo = _mm512_shuffle_i32x4(c[0], c[1], 0x88);
  *hi = _mm512_shuffle_i32x4(c[0], c[1], 0xDD);
}

// A query quantized to Q8_0 for integer scoring: per 64-dimension pair its 64 codes and the
// start value of each int32 lane, -128 times the sum of the lane's four codes, which takes back
// the +128 that makes K's codes unsigned for vpdpbusd; per block d_q times the attention scale.
struct IntQuery {
  alignas(64) int8_t codes[kMaxPairs][64];
  alignas(64) int32_t start[kMaxPairs][16];
  float dq[kMaxScales];
};

void QuantizeQuery(const float* q, int hd, float scale, IntQuery* out) {
  BlockQ8_0 blocks[kMaxScales];
  avx2::FromFloatQ8_0(q, blocks, hd);
  for (int b = 0; b < hd / 32; ++b) {
    std::memcpy(&out->codes[b / 2][32 * (b % 2)], blocks[b].qs, 32);
    out->dq[b] = _cvtsh_ss(blocks[b].d) * scale;
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int p = 0; p < hd / 64; ++p) {
    const __m512i c = _mm512_load_si512(out->codes[p]);
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, c);
    _mm512_store_si512(out->start[p], _mm512_sub_epi32(_mm512_setzero_si512(), sum));
  }
}

// The 64 codes of pair p of a q8_0 row as unsigned bytes (code + 128).
inline __m512i PairCodes(const uint8_t* row, int p) {
  const uint8_t* blk = row + 2 * p * kQ8Block + 2;
  const __m512i c = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ8Block)), 1);
  return _mm512_xor_si512(c, _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Dimensions d .. d+15 of a row as f32: f16 converted, or q8_0 codes (the caller applies the
// block's scale).
template <bool kQ8>
inline __m512 Load16(const uint8_t* row, int d) {
  if constexpr (kQ8) {
    const uint8_t* codes = row + (d / 32) * kQ8Block + 2 + d % 32;
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d)));
  }
}

// The f16 scale of block b of a q8_0 row, as f32.
inline float RowScale(const uint8_t* row, int b) {
  uint16_t bits;
  std::memcpy(&bits, row + b * kQ8Block, 2);
  return _cvtsh_ss(bits);
}

// Pulls a row's cache lines in: a tile's rows come from a pool block of their own, a stream
// too short for the hardware prefetcher to lock on.
inline void Prefetch(const uint8_t* row, int bytes) {
  for (int b = 0; b < bytes; b += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T0);
  }
}

struct Tile {
  // Row pointers: rows 0..n-1 are the tile's, rows n..n_ahead-1 follow it (prefetched).
  const uint8_t* const* k;
  const uint8_t* const* v;
  int n;
  int n_ahead;
  alignas(64) float s[kMaxPass][kTile];  // scores, then weights
  // q8_0 V: the rows' block scales, and the weights times them for two blocks (64 dimensions).
  alignas(64) float v_scales[kMaxScales][kTile];
  alignas(64) float w[kMaxPass][2][kTile];
};

// Pass 1 for q8_0 K scored in integers (kIntScores): as Scores below, with q_g quantized.
template <int kDim, bool kVQ8, int kG>
void IntScores(const IntQuery* iq, Tile* t, float* max) {
  constexpr int kPairs = kDim / 64;
  const int v_bytes = kVQ8 ? kDim / 32 * kQ8Block : 2 * kDim;
  __m512 vmax[kG];
  for (int g = 0; g < kG; ++g) vmax[g] = _mm512_set1_ps(-INFINITY);
  for (int r0 = 0; r0 < t->n; r0 += 16) {
    alignas(32) uint16_t dk[2 * kPairs][16];  // the rows' K block scales (f16)
    __m512 s[kG];
    for (int g = 0; g < kG; ++g) s[g] = _mm512_setzero_ps();
    for (int p = 0; p < kPairs; ++p) {
      __m512i dots[kG][16];
      for (int r = 0; r < 16; ++r) {
        const int row = std::min(r0 + r, t->n - 1);  // past n: repeat the last row (masked below)
        const uint8_t* k = t->k[row];
        if (p == 0) {
          const int ahead = std::min(r0 + r + kPrefetchRows, t->n_ahead - 1);
          Prefetch(t->k[ahead], kDim / 32 * kQ8Block);
          Prefetch(t->v[ahead], v_bytes);
          for (int b = 0; kVQ8 && b < kDim / 32; ++b) {
            t->v_scales[b][r0 + r] = RowScale(t->v[row], b);
          }
        }
        std::memcpy(&dk[2 * p][r], k + 2 * p * kQ8Block, 2);
        std::memcpy(&dk[2 * p + 1][r], k + (2 * p + 1) * kQ8Block, 2);
        const __m512i kc = PairCodes(k, p);
        for (int g = 0; g < kG; ++g) {
          dots[g][r] = _mm512_dpbusd_epi32(_mm512_load_si512(iq[g].start[p]), kc,
                                           _mm512_load_si512(iq[g].codes[p]));
        }
      }
      const __m512 dk0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(dk[2 * p])));
      const __m512 dk1 =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<__m256i*>(dk[2 * p + 1])));
      for (int g = 0; g < kG; ++g) {
        __m512i lo, hi;
        HsumHalves16(dots[g], &lo, &hi);
        s[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo),
                               _mm512_mul_ps(dk0, _mm512_set1_ps(iq[g].dq[2 * p])), s[g]);
        s[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi),
                               _mm512_mul_ps(dk1, _mm512_set1_ps(iq[g].dq[2 * p + 1])), s[g]);
      }
    }
    const int live_rows = std::min(16, t->n - r0);
    const __mmask16 live = static_cast<__mmask16>((1u << live_rows) - 1);
    for (int g = 0; g < kG; ++g) {
      const __m512 sg = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), s[g]);
      _mm512_store_ps(&t->s[g][r0], sg);
      vmax[g] = _mm512_max_ps(vmax[g], sg);
    }
  }
  for (int g = 0; g < kG; ++g) max[g] = _mm512_reduce_max_ps(vmax[g]);
}

// Pass 1: t->s[g][r] = q_g . k_r (q pre-scaled) for the tile's rows, -inf past n; returns each
// query's maximum in max[g]. Also reads the V rows' scales (q8_0), so that the V rows' first
// cache lines are loaded while the K rows are scored rather than stalling pass 2.
template <int kDim, bool kKQ8, bool kVQ8, int kG>
void Scores(const float* q, const IntQuery* iq, int head_dim, Tile* t, float* max) {
  const int hd = kDim > 0 ? kDim : head_dim;
  if constexpr (kIntScores<kDim, kKQ8>) return IntScores<kDim, kVQ8, kG>(iq, t, max);
  const int nb = hd / 32;
  const int k_bytes = kKQ8 ? nb * kQ8Block : 2 * hd, v_bytes = kVQ8 ? nb * kQ8Block : 2 * hd;
  __m512 vmax[kG];
  for (int g = 0; g < kG; ++g) vmax[g] = _mm512_set1_ps(-INFINITY);
  for (int r0 = 0; r0 < t->n; r0 += 16) {
    __m512 dots[kG][16];
    for (int r = 0; r < 16; ++r) {
      const int row = std::min(r0 + r, t->n - 1);  // past n: repeat the last row (masked below)
      const uint8_t* k = t->k[row];
      const int ahead = std::min(r0 + r + kPrefetchRows, t->n_ahead - 1);
      Prefetch(t->k[ahead], k_bytes);
      Prefetch(t->v[ahead], v_bytes);
      float sc[kMaxScales];
      for (int b = 0; kKQ8 && b < nb; ++b) sc[b] = RowScale(k, b);
      for (int b = 0; kVQ8 && b < nb; ++b) t->v_scales[b][r0 + r] = RowScale(t->v[row], b);
      __m512 acc[kG];
      for (int g = 0; g < kG; ++g) acc[g] = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 16) {
        __m512 kv = Load16<kKQ8>(k, d);
        if constexpr (kKQ8) kv = _mm512_mul_ps(kv, _mm512_set1_ps(sc[d / 32]));
        for (int g = 0; g < kG; ++g) {
          acc[g] = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q + g * hd + d), acc[g]);
        }
      }
      for (int g = 0; g < kG; ++g) dots[g][r] = acc[g];
    }
    const int live_rows = std::min(16, t->n - r0);
    const __mmask16 live = static_cast<__mmask16>((1u << live_rows) - 1);
    for (int g = 0; g < kG; ++g) {
      const __m512 s = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), Hsum16(dots[g]));
      _mm512_store_ps(&t->s[g][r0], s);
      vmax[g] = _mm512_max_ps(vmax[g], s);
    }
  }
  for (int g = 0; g < kG; ++g) max[g] = _mm512_reduce_max_ps(vmax[g]);
}

// Pass 2: folds the tile into the running state of kG queries (acc: kG x hd, m, l).
template <int kDim, bool kVQ8, int kG>
void SoftmaxAndValues(int head_dim, Tile* t, const float* tile_max, float* acc, float* m,
                      float* l) {
  const int hd = kDim > 0 ? kDim : head_dim;
  for (int g = 0; g < kG; ++g) {
    if (tile_max[g] > m[g]) {
      const float alpha = m[g] == -INFINITY ? 0.0f : std::exp(m[g] - tile_max[g]);
      m[g] = tile_max[g];
      l[g] *= alpha;
      const __m512 va = _mm512_set1_ps(alpha);
      for (int d = 0; d < hd; d += 16) {
        _mm512_storeu_ps(acc + g * hd + d, _mm512_mul_ps(_mm512_loadu_ps(acc + g * hd + d), va));
      }
    }
    const __m512 vm = _mm512_set1_ps(m[g]);
    __m512 sum = _mm512_setzero_ps();
    for (int r0 = 0; r0 < t->n; r0 += 16) {
      const int live_rows = std::min(16, t->n - r0);
      const __mmask16 live = static_cast<__mmask16>((1u << live_rows) - 1);
      const __m512 p =
          _mm512_maskz_mov_ps(live, Exp16(_mm512_sub_ps(_mm512_load_ps(&t->s[g][r0]), vm)));
      _mm512_store_ps(&t->s[g][r0], p);
      sum = _mm512_add_ps(sum, p);
    }
    l[g] += _mm512_reduce_add_ps(sum);
  }
  // Four 16-dimension columns (two q8_0 blocks) at a time, their kG accumulators in registers
  // over all rows; a q8_0 row's scale goes into the weights, not into the row.
  const int n16 = (t->n + 15) / 16 * 16;
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int cols = std::min(4, (hd - d0) / 16);
    if constexpr (kVQ8) {
      for (int g = 0; g < kG; ++g) {
        for (int j = 0; j < (cols + 1) / 2; ++j) {
          for (int r0 = 0; r0 < n16; r0 += 16) {
            _mm512_store_ps(&t->w[g][j][r0],
                            _mm512_mul_ps(_mm512_load_ps(&t->s[g][r0]),
                                          _mm512_load_ps(&t->v_scales[d0 / 32 + j][r0])));
          }
        }
      }
    }
    __m512 o[kG][4];
    for (int g = 0; g < kG; ++g) {
      for (int c = 0; c < cols; ++c) o[g][c] = _mm512_loadu_ps(acc + g * hd + d0 + 16 * c);
    }
    for (int r = 0; r < t->n; ++r) {
      const uint8_t* v = t->v[r];
      for (int c = 0; c < cols; ++c) {
        const __m512 vv = Load16<kVQ8>(v, d0 + 16 * c);
        for (int g = 0; g < kG; ++g) {
          const float p = kVQ8 ? t->w[g][c / 2][r] : t->s[g][r];
          o[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(p), vv, o[g][c]);
        }
      }
    }
    for (int g = 0; g < kG; ++g) {
      for (int c = 0; c < cols; ++c) _mm512_storeu_ps(acc + g * hd + d0 + 16 * c, o[g][c]);
    }
  }
}

template <int kDim, bool kKQ8, bool kVQ8, int kG>
void AttendPass(const float* q, int head_dim, const KvSpan* spans, int n_spans, float scale,
                float* acc, float* m, float* l) {
  const int hd = kDim > 0 ? kDim : head_dim;
  alignas(64) float qs[kMaxPass * kAttendStackDim];
  IntQuery iq[kIntScores<kDim, kKQ8> ? kG : 1];
  if constexpr (kIntScores<kDim, kKQ8>) {
    for (int g = 0; g < kG; ++g) QuantizeQuery(q + g * hd, hd, scale, &iq[g]);
  } else {
    for (int i = 0; i < kG * hd; ++i) qs[i] = q[i] * scale;
  }
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  std::memset(acc, 0, sizeof(float) * kG * hd);
  Tile t;
  ForEachRowBlock<kSegment>(spans, n_spans,
                            [&](const uint8_t* const* k, const uint8_t* const* v, int n) {
                              for (int i = 0; i < n; i += kTile) {
                                t.k = k + i;
                                t.v = v + i;
                                t.n = std::min(kTile, n - i);
                                t.n_ahead = n - i;
                                float tile_max[kG];
                                Scores<kDim, kKQ8, kVQ8, kG>(qs, iq, hd, &t, tile_max);
                                SoftmaxAndValues<kDim, kVQ8, kG>(hd, &t, tile_max, acc, m, l);
                              }
                            });
}

template <int kDim, bool kKQ8, bool kVQ8>
void AttendGroup(const float* q, int n_q, int head_dim, const KvSpan* spans, int n_spans,
                 float scale, float* acc, float* m, float* l) {
  for (int g = 0; g < n_q; g += kMaxPass) {
    const size_t off = static_cast<size_t>(g) * head_dim;
    float* a = acc + off;
    switch (std::min(kMaxPass, n_q - g)) {
      case 1:
        AttendPass<kDim, kKQ8, kVQ8, 1>(q + off, head_dim, spans, n_spans, scale, a, m + g, l + g);
        break;
      case 2:
        AttendPass<kDim, kKQ8, kVQ8, 2>(q + off, head_dim, spans, n_spans, scale, a, m + g, l + g);
        break;
      case 3:
        AttendPass<kDim, kKQ8, kVQ8, 3>(q + off, head_dim, spans, n_spans, scale, a, m + g, l + g);
        break;
      default:
        AttendPass<kDim, kKQ8, kVQ8, 4>(q + off, head_dim, spans, n_spans, scale, a, m + g, l + g);
        break;
    }
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
