// BlockMaxDot with AVX2/FMA. Keys are taken 16 at a time (two 8-key halves, each inside one
// block since block_size % 8 == 0) and transposed to (dim, 16), so that one dimension of 16 keys
// is two vector loads; four query rows share them, each a broadcast, in eight accumulators. A
// half's maximum over its valid lanes then goes to its block.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "kernels/block_max_dot.h"

namespace kvmem::kernels {
namespace {

float MaxOfLanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Rows [r, r + NR) against the 16 transposed keys kt (dim, 16): the maxima of each half's first
// `valid[h]` lanes, folded into best[row][h].
template <int NR>
void Tile(const float* x, int dim, const float* kt, const int valid[2], float best[][2]) {
  __m256 acc[NR][2];
  for (int i = 0; i < NR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    const __m256 k0 = _mm256_load_ps(kt + d * 16);
    const __m256 k1 = _mm256_load_ps(kt + d * 16 + 8);
    for (int i = 0; i < NR; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + static_cast<int64_t>(i) * dim + d);
      acc[i][0] = _mm256_fmadd_ps(xi, k0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xi, k1, acc[i][1]);
    }
  }
  const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (int h = 0; h < 2; ++h) {
    if (valid[h] == 0) continue;
    const __m256 keep =
        _mm256_cmp_ps(lane, _mm256_set1_ps(static_cast<float>(valid[h])), _CMP_LT_OQ);
    for (int i = 0; i < NR; ++i) {
      best[i][h] = std::fmax(best[i][h], MaxOfLanes(_mm256_blendv_ps(neg_inf, acc[i][h], keep)));
    }
  }
}

}  // namespace

void BlockMaxDotAvx2(const float* x, int64_t n_rows, int dim, const float* keys, int64_t key_stride,
                     int64_t n_keys, int block_size, int64_t b0, int64_t b1, float* out,
                     int64_t out_stride) {
  assert(block_size % 8 == 0 && dim <= kBlockMaxDotMaxDim);
  alignas(32) float kt[kBlockMaxDotMaxDim * 16];
  const int64_t first = b0 * block_size;
  const int64_t last = std::min(n_keys, b1 * block_size);
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t r = 0; r < n_rows; ++r) out[r * out_stride + b] = -INFINITY;
  }
  float best[4][2];
  for (int64_t j0 = first; j0 < last; j0 += 16) {
    const int n = static_cast<int>(std::min<int64_t>(16, last - j0));
    for (int j = 0; j < 16; ++j) {  // keys past the last are zeros, masked out below
      const float* k = j < n ? keys + (j0 + j) * key_stride : nullptr;
      for (int d = 0; d < dim; ++d) kt[d * 16 + j] = k != nullptr ? k[d] : 0.0f;
    }
    const int valid[2] = {std::min(n, 8), std::max(0, n - 8)};
    const int64_t block[2] = {j0 / block_size, (j0 + 8) / block_size};
    for (int64_t r = 0; r < n_rows; r += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, n_rows - r));
      for (int i = 0; i < nr; ++i) best[i][0] = best[i][1] = -INFINITY;
      const float* xr = x + r * dim;
      switch (nr) {
        case 4:
          Tile<4>(xr, dim, kt, valid, best);
          break;
        case 3:
          Tile<3>(xr, dim, kt, valid, best);
          break;
        case 2:
          Tile<2>(xr, dim, kt, valid, best);
          break;
        default:
          Tile<1>(xr, dim, kt, valid, best);
          break;
      }
      for (int i = 0; i < nr; ++i) {
        for (int h = 0; h < 2; ++h) {
          if (valid[h] == 0) continue;
          float* o = out + (r + i) * out_stride + block[h];
          *o = std::fmax(*o, best[i][h]);
        }
      }
    }
  }
}

}  // namespace kvmem::kernels
