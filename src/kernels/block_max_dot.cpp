#include "kernels/block_max_dot.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvmem::kernels {

void BlockMaxDotScalar(const float* x, int64_t n_rows, int dim, const float* keys,
                       int64_t key_stride, int64_t n_keys, int block_size, int64_t b0, int64_t b1,
                       float* out, int64_t out_stride) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t first = b * block_size;
    const int64_t last = std::min(n_keys, first + block_size);
    assert(first < last);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * dim;
      float best = -INFINITY;
      for (int64_t i = first; i < last; ++i) {
        const float* k = keys + i * key_stride;
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += xr[d] * k[d];
        best = std::fmax(best, dot);
      }
      out[r * out_stride + b] = best;
    }
  }
}

void BlockMaxDot(const float* x, int64_t n_rows, int dim, const float* keys, int64_t key_stride,
                 int64_t n_keys, int block_size, int64_t b0, int64_t b1, float* out,
                 int64_t out_stride, Isa isa) {
  assert(block_size >= 1 && dim >= 1 && b0 >= 0 && b1 * block_size - block_size < n_keys);
  if (b0 >= b1 || n_rows <= 0) return;
#if defined(__x86_64__)
  if (isa == Isa::kAvx2 && block_size % 8 == 0 && dim <= kBlockMaxDotMaxDim) {
    return BlockMaxDotAvx2(x, n_rows, dim, keys, key_stride, n_keys, block_size, b0, b1, out,
                           out_stride);
  }
#endif
  BlockMaxDotScalar(x, n_rows, dim, keys, key_stride, n_keys, block_size, b0, b1, out, out_stride);
}

}  // namespace kvmem::kernels
