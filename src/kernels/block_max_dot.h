// The exact relevance of key blocks to query rows: for every row x_r and block b of keys, the
// maximum of x_r . k over the block's keys (memory/retrieval/block_scoring.h, BlockScore::kExact).
// One pass over the keys does every row, so a long history is read once per KV head and layer,
// not once per query row. Scalar reference and AVX2/FMA; both sum the products in float, in
// dimension order per lane for AVX2, so they agree to float rounding, not bit for bit.
// Thread-safety: pure functions; callers split [b0, b1) across threads.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace kvmem::kernels {

// For rows r < n_rows and blocks b in [b0, b1):
//   out[r * out_stride + b] = max over keys i in [b * block_size, min((b + 1) * block_size,
//   n_keys)) of sum_d x[r * dim + d] * keys[i * key_stride + d].
// Every block in [b0, b1) must hold at least one key. block_size >= 1; dim >= 1.
void BlockMaxDot(const float* x, int64_t n_rows, int dim, const float* keys, int64_t key_stride,
                 int64_t n_keys, int block_size, int64_t b0, int64_t b1, float* out,
                 int64_t out_stride, Isa isa = ActiveIsa());

// The variants behind BlockMaxDot (internal; the AVX2 one requires block_size % 8 == 0 and
// dim <= kBlockMaxDotMaxDim, which BlockMaxDot checks before choosing it).
inline constexpr int kBlockMaxDotMaxDim = 512;
void BlockMaxDotScalar(const float* x, int64_t n_rows, int dim, const float* keys,
                       int64_t key_stride, int64_t n_keys, int block_size, int64_t b0, int64_t b1,
                       float* out, int64_t out_stride);
void BlockMaxDotAvx2(const float* x, int64_t n_rows, int dim, const float* keys, int64_t key_stride,
                     int64_t n_keys, int block_size, int64_t b0, int64_t b1, float* out,
                     int64_t out_stride);

}  // namespace kvmem::kernels
