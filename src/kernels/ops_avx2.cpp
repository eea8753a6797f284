// The AVX2/FMA OpsTable: the scalar table's numerics (ops_scalar.cpp) eight lanes at a time, with
// the vector expf of vec_math_avx2.h. Loop tails use masked loads and stores, so every element
// goes through the same vector code and no pointer needs any alignment.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/ops_internal.h"
#include "kernels/vec_math_avx2.h"

namespace kvmem::kernels {
namespace {

using avx2::TailMask;

// Applies f (a __m256 -> __m256 function of the lane values of x and u) to all n elements.
template <typename F>
inline void Map2(const float* x, const float* u, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(x + i), _mm256_loadu_ps(u + i)));
  }
  if (i < n) {
    const __m256i mask = TailMask(static_cast<int>(n - i));
    const __m256 r = f(_mm256_maskload_ps(x + i, mask), _mm256_maskload_ps(u + i, mask));
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Squares rounded to float as in the scalar table, then summed in double.
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i);
    const __m256 b = _mm256_loadu_ps(x + i + 8);
    acc0 = avx2::AddWidened(acc0, _mm256_mul_ps(a, a));
    acc1 = avx2::AddWidened(acc1, _mm256_mul_ps(b, b));
  }
  for (; i < n; i += 8) {
    const __m256 a = _mm256_maskload_ps(x + i, TailMask(static_cast<int>(n - i < 8 ? n - i : 8)));
    acc0 = avx2::AddWidened(acc0, _mm256_mul_ps(a, a));
  }
  const double sum = avx2::HsumPd(_mm256_add_pd(acc0, acc1));
  const float mean = n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : 0.0f;
  const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
  if (w == nullptr) {
    Map2(x, x, y, n, [scale](__m256 a, __m256) { return _mm256_mul_ps(a, scale); });
  } else {
    Map2(x, w, y, n,
         [scale](__m256 a, __m256 b) { return _mm256_mul_ps(_mm256_mul_ps(a, scale), b); });
  }
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  Map2(gate, up, out, n, [=](__m256 g, __m256 u) {
    const __m256 e = avx2::Exp(_mm256_xor_ps(g, sign));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
  });
}

void GeGlu(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 coef = _mm256_set1_ps(0.044715f);
  // -2 sqrt(2/pi), so exp's argument is -2y with one multiply fewer.
  const __m256 k = _mm256_set1_ps(-2.0f * 0.79788456080286535588f);
  Map2(gate, up, out, n, [=](__m256 g, __m256 u) {
    // y = (c g) (1 + coef g g), with 1 + (coef g) g fused (GCC contracts it anyway in C++), so
    // y, and exp(-2y) by |2y| times as much, can differ from the scalar table by a few ulp.
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(coef, g), g, one);
    const __m256 y2 = _mm256_mul_ps(_mm256_mul_ps(k, g), inner);
    const __m256 e = avx2::Exp(y2);
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
  });
}

void Softmax(float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = avx2::Hmax(vmax);
  for (; i < n; ++i) max = std::fmax(max, x[i]);

  const __m256 m = _mm256_set1_ps(max);
  __m256d sum = _mm256_setzero_pd();
  for (i = 0; i < n; i += 8) {
    const int lanes = static_cast<int>(n - i < 8 ? n - i : 8);
    const __m256i mask = TailMask(lanes);
    __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), m));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    sum = avx2::AddWidened(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / avx2::HsumPd(sum)));
  Map2(x, x, x, n, [inv](__m256 a, __m256) { return _mm256_mul_ps(a, inv); });
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  Map2(x, y, y, n, [va](__m256 xv, __m256 yv) { return _mm256_fmadd_ps(va, xv, yv); });
}

float Dot(const float* x, const float* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      acc[j] =
          _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
    }
  }
  for (; i < n; i += 8) {
    const __m256i mask = TailMask(static_cast<int>(n - i < 8 ? n - i : 8));
    acc[0] =
        _mm256_fmadd_ps(_mm256_maskload_ps(x + i, mask), _mm256_maskload_ps(y + i, mask), acc[0]);
  }
  return avx2::Hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void Exp(const float* x, float* y, int64_t n) {
  Map2(x, x, y, n, [](__m256 a, __m256) { return avx2::Exp(a); });
}

}  // namespace

const OpsTable& Avx2OpsTable() {
  static constexpr OpsTable kTable = {
      .rope_rotate = RopeRotateAvx2,
      .rms_norm = RmsNorm,
      .swiglu = SwiGlu,
      .geglu = GeGlu,
      .softmax = Softmax,
      .axpy = Axpy,
      .dot = Dot,
      .exp = Exp,
  };
  return kTable;
}

}  // namespace kvmem::kernels
