// OpsTable::rope_rotate with AVX2/FMA, eight dimensions at a time; the scalar tail handles
// rot_dim not a multiple of 16 (normal) or of 16 per half (neox).
//   neox:   pair i is (x[i], x[i + half]): contiguous loads of both halves.
//   normal: pair i is (x[2i], x[2i+1]): one load holds four pairs; the partner of each lane comes
//           from a swap within pairs, and addsub applies the signs (-, +) of the rotation.
#include <immintrin.h>

#include <cassert>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/ops_internal.h"

namespace kvmem::kernels {

void RopeRotateAvx2(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_t,
                    const float* sin_t, RopeMode mode) {
  assert(rot_dim % 2 == 0 && rot_dim <= head_dim);
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int i = 0;
    if (mode == RopeMode::kNeox) {
      for (; i + 8 <= half; i += 8) {
        const __m256 x0 = _mm256_loadu_ps(v + i);
        const __m256 x1 = _mm256_loadu_ps(v + half + i);
        const __m256 c = _mm256_loadu_ps(cos_t + i);
        const __m256 s = _mm256_loadu_ps(sin_t + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
      }
      for (; i < half; ++i) {
        const float x0 = v[i], x1 = v[half + i];
        v[i] = x0 * cos_t[i] - x1 * sin_t[i];
        v[half + i] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    } else {
      for (; i + 4 <= half; i += 4) {
        const __m128 c4 = _mm_loadu_ps(cos_t + i);
        const __m128 s4 = _mm_loadu_ps(sin_t + i);
        // (c0 c0 c1 c1 | c2 c2 c3 c3)
        const __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        const __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
        const __m256 xv = _mm256_loadu_ps(v + 2 * i);                // (a0 b0 a1 b1 ...)
        const __m256 xs = _mm256_permute_ps(xv, 0xb1);               // (b0 a0 b1 a1 ...)
        // even lanes: a c - b s; odd lanes: b c + a s
        _mm256_storeu_ps(v + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(xv, c), _mm256_mul_ps(xs, s)));
      }
      for (; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        v[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

}  // namespace kvmem::kernels
